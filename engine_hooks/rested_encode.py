"""msgpack encoding of big messages in short pieces with rests between them, for the request and
publisher threads.

msgspec holds the GIL for a whole `encode` call: a 100k-node snapshot is 100 ms or more during
which the scheduler thread (Python too) cannot run. Here each big dict or list field of a
Snapshot or Delta is encoded CHUNK items at a time, the pieces joined under a msgpack header
(map32 / array32) and embedded as `msgspec.Raw`, so the outer encode copies bytes. After each
piece the thread sleeps REST_RATIO times as long as the piece took: the scheduler gets the GIL
at once, and when it hands the GIL over mid-step (every torch op does) it is back within a
piece (a quarter of a millisecond) and mostly at once. The bytes decode to the same message.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import msgspec

from mcinspect.schema import Delta, Snapshot

CHUNK = 250
"""Items per piece: about a quarter of a millisecond of encoding for node records (1000 a piece
stretched the scheduler's steps by tens of ms while a 100k-node snapshot was encoded)."""
REST_RATIO = 3
"""Rest after a piece, in multiples of its time: the encoding takes at most a quarter of the
wall time, so it is waiting for the GIL when the scheduler hands it over less often."""

_DELTA_FIELDS = ("upsert_nodes", "removed_nodes", "slots", "upsert_requests", "contents", "events")
_STATE_FIELDS = ("nodes", "slots", "requests", "contents")


def encode_rested(encoder: msgspec.msgpack.Encoder, message: Any, rest: Callable[[float], None] = time.sleep) -> bytes:
    """`encoder.encode(message)`, with a Snapshot's or Delta's big fields encoded piece by piece
    and `rest(seconds)` after each piece (REST_RATIO times the piece's own duration)."""
    if isinstance(message, Snapshot):
        state = message.state
        pieces = {name: _rested(encoder, getattr(state, name), rest) for name in _STATE_FIELDS}
        message = msgspec.structs.replace(message, state=msgspec.structs.replace(state, **pieces))
    elif isinstance(message, Delta):
        pieces = {name: _rested(encoder, getattr(message, name), rest) for name in _DELTA_FIELDS}
        message = msgspec.structs.replace(message, **pieces)
    return encoder.encode(message)


def _rested(encoder: msgspec.msgpack.Encoder, value: Any, rest: Callable[[float], None]) -> Any:
    """`value` itself when small, else its encoding as `msgspec.Raw`."""
    if len(value) <= CHUNK:
        return value
    is_map = isinstance(value, dict)
    items = iter(value.items()) if is_map else iter(value)
    parts = [(b"\xdf" if is_map else b"\xdd") + len(value).to_bytes(4, "big")]
    # dict(islice(items)) takes each (key, value) pair without keeping it: no 250 tuples a piece
    # for the cyclic GC to count (their allocations set off young collections on this thread).
    while chunk := (dict if is_map else list)(itertools.islice(items, CHUNK)):
        began = time.perf_counter()
        encoded = encoder.encode(chunk)
        parts.append(encoded[_header_len(len(chunk)) :])
        rest((time.perf_counter() - began) * REST_RATIO)
    return msgspec.Raw(b"".join(parts))


def _header_len(count: int) -> int:
    """Bytes of msgpack's map or array header for `count` items (fix, 16- or 32-bit form)."""
    return 1 if count <= 15 else 3 if count <= 0xFFFF else 5
