"""msgpack encoding of big messages in short pieces with rests between them, for the request and
publisher threads.

msgspec holds the GIL for a whole `encode` call: a 100k-node snapshot is 100 ms or more during
which the scheduler thread (Python too) cannot run. Here each big dict or list field of a
Snapshot or Delta, and each frozen map of the inspector's SnapshotParts (read a shard at a
time: published_state.py), is encoded CHUNK items at a time; after each piece the thread sleeps
REST_RATIO times as long as the piece took: the scheduler gets the GIL at once, and when it
hands the GIL over mid-step (every torch op does) it is back within a piece (a quarter of a
millisecond) and mostly at once. The bytes decode to the same message.

The message itself is then assembled without one big copy either: joining the pieces and
embedding them in the outer encode copied the whole message twice in two single calls (a
100k-node snapshot: 10-30 ms of GIL each, measured with the bench's `--gil-holds`). The outer
message is encoded with a short random marker in place of each big field, and the output is
filled from that skeleton and the pieces COPY_BYTES at a time, with rests, into a bytearray.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import msgspec

from mcinspect.schema import SCHEMA_VERSION, CacheState, Delta, History, Snapshot

from .cow_map import Frozen
from .published_state import SnapshotParts

CHUNK = 250
"""Items per piece: about a quarter of a millisecond of encoding for node records (1000 a piece
stretched the scheduler's steps by tens of ms while a 100k-node snapshot was encoded)."""
REST_RATIO = 3
"""Rest after a piece, in multiples of its time: the encoding takes at most a quarter of the
wall time, so it is waiting for the GIL when the scheduler hands it over less often."""
COPY_BYTES = 1 << 20
"""Bytes copied into the output between rests: a fraction of a millisecond of memcpy."""

_DELTA_FIELDS = ("upsert_nodes", "removed_nodes", "slots", "upsert_requests", "contents", "events")
STATE_FIELDS = ("nodes", "slots", "requests", "contents")
"""CacheState's big fields (also freed in pieces: rested_free.py)."""

Encoded = bytes | bytearray
"""An encoded message: bytes, or a bytearray when it was assembled from pieces (never changed
afterwards; zmq, msgspec.Raw and the decoders take either)."""


def encode_rested(encoder: msgspec.msgpack.Encoder, message: Any, rest: Callable[[float], None] = time.sleep) -> Encoded:
    """`encoder.encode(message)`, with a Snapshot's or Delta's big fields encoded piece by piece
    and a History's deltas (encoded already) copied piece by piece, `rest(seconds)` after each
    piece (REST_RATIO times the piece's own duration). SnapshotParts encode as the Snapshot
    they stand for."""
    pieces: list[list[Any]] = []
    if isinstance(message, SnapshotParts):
        published = message.published
        values = (published.nodes, published.slots, published.requests, message.contents)
        big = {name: _rested(encoder, value, rest, pieces) for name, value in zip(STATE_FIELDS, values)}
        state = CacheState(step=published.step, kv=published.kv, **big)
        message = Snapshot(schema_version=SCHEMA_VERSION, seq=message.seq, state=state, counters=message.counters)
    elif isinstance(message, Snapshot):
        state = message.state
        fields = {name: _rested(encoder, getattr(state, name), rest, pieces) for name in STATE_FIELDS}
        message = msgspec.structs.replace(message, state=msgspec.structs.replace(state, **fields))
    elif isinstance(message, Delta):
        fields = {name: _rested(encoder, getattr(message, name), rest, pieces) for name in _DELTA_FIELDS}
        message = msgspec.structs.replace(message, **fields)
    elif isinstance(message, History) and _raw_bytes(message.deltas) > COPY_BYTES:
        # The ring's deltas, embedded as msgspec.Raw (server.py): after a catch-up one is big.
        marker = os.urandom(16)
        raws = [memoryview(raw) for raw in message.deltas]  # type: ignore[arg-type]  # all Raw: checked
        pieces.append([marker, b"\xdd" + len(raws).to_bytes(4, "big"), *raws])
        message = msgspec.structs.replace(message, deltas=msgspec.Raw(marker))
    skeleton = encoder.encode(message)
    return _assemble(skeleton, pieces, rest) if pieces else skeleton


def _raw_bytes(deltas: list[Any]) -> int:
    """Bytes of `deltas` when all are encoded already (msgspec.Raw), else 0."""
    if not all(isinstance(delta, msgspec.Raw) for delta in deltas):
        return 0
    return sum(len(memoryview(delta)) for delta in deltas)


def _rested(encoder: msgspec.msgpack.Encoder, value: Any, rest: Callable[[float], None], pieces: list[list[Any]]) -> Any:
    """`value` itself when a small dict or list, else a marker (as `msgspec.Raw`) for its
    encoding (a map's for a Frozen, whatever its size), which is appended to `pieces` as
    [marker, header, piece, ...]."""
    if isinstance(value, Frozen):
        is_map, items = True, itertools.chain.from_iterable(shard.items() for shard in value.shards())
    elif len(value) <= CHUNK:
        return value
    else:
        is_map = isinstance(value, dict)
        items = iter(value.items()) if is_map else iter(value)
    marker = os.urandom(16)
    parts = [marker, (b"\xdf" if is_map else b"\xdd") + len(value).to_bytes(4, "big")]
    # dict(islice(items)) takes each (key, value) pair without keeping it: no 250 tuples a piece
    # for the cyclic GC to count (their allocations set off young collections on this thread).
    while chunk := (dict if is_map else list)(itertools.islice(items, CHUNK)):
        began = time.perf_counter()
        encoded = encoder.encode(chunk)
        parts.append(encoded[_header_len(len(chunk)) :])
        rest((time.perf_counter() - began) * REST_RATIO)
    pieces.append(parts)
    return msgspec.Raw(marker)


def _assemble(skeleton: bytes, pieces: list[list[Any]], rest: Callable[[float], None]) -> bytearray:
    """The skeleton with each marker replaced by its encoding ([marker, bytes-like, ...] each),
    copied COPY_BYTES at a time."""
    spans: list[memoryview] = []
    view, at = memoryview(skeleton), 0
    for marker, *parts in pieces:
        found = skeleton.index(marker, at)  # 16 random bytes: found where the encoder put them
        spans.append(view[at:found])
        spans.extend(memoryview(part) for part in parts)
        at = found + len(marker)
    spans.append(view[at:])
    out = bytearray(sum(len(span) for span in spans))  # zeroed pages from the kernel: no copy yet
    position, since_rest, began = 0, 0, time.perf_counter()
    for span in spans:
        for start in range(0, len(span), COPY_BYTES):
            part = span[start : start + COPY_BYTES]
            out[position : position + len(part)] = part
            position += len(part)
            since_rest += len(part)
            if since_rest >= COPY_BYTES:
                rest((time.perf_counter() - began) * REST_RATIO)
                since_rest, began = 0, time.perf_counter()
    return out


def _header_len(count: int) -> int:
    """Bytes of msgpack's map or array header for `count` items (fix, 16- or 32-bit form)."""
    return 1 if count <= 15 else 3 if count <= 0xFFFF else 5
