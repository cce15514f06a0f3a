"""Decoding bytes from outside (a socket, a file): every way it can fail is one error type.

msgspec validates against the schema as it decodes, so a typed field stops any nesting deeper
than the schema at its first wrong level. Only skipping is unbounded: a tagged message whose
tag comes after a field, an unknown field a probe passes over, a `msgspec.Raw`. msgspec skips
recursively under the interpreter's recursion limit and raises RecursionError, which is not a
DecodeError: `decode` turns it, and every other failure, into the caller's error type.
`msgpack_depth_exceeds` is the explicit bound for payloads small enough to scan first (requests).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from .errors import McinspectError, one_line

T = TypeVar("T")

MAX_DEPTH = 32
"""Deepest nesting a message may have; the schema's deepest is 6 (Snapshot > state > nodes >
record > kv_runs > run)."""

MAX_MESSAGE_ENV = "MCINSPECT_MAX_MESSAGE_MB"
DEFAULT_MAX_MESSAGE_MB = 512


def max_message_bytes() -> int:
    """Largest message a client takes from the wire or a recording frame (a 1M-node snapshot
    is ~0.2 GB); MCINSPECT_MAX_MESSAGE_MB raises it."""
    try:
        return int(float(os.environ.get(MAX_MESSAGE_ENV, DEFAULT_MAX_MESSAGE_MB)) * (1 << 20))
    except ValueError:
        return DEFAULT_MAX_MESSAGE_MB << 20


DECODE_FAILURES: tuple[type[BaseException], ...] = (
    msgspec.DecodeError,  # ValidationError included
    RecursionError,
    MemoryError,
    ValueError,
    TypeError,
    OverflowError,
)
"""What decoding untrusted bytes may raise."""


class DecodeFailed(McinspectError):
    """Bytes from outside that do not decode as the message expected."""


def decode(decoder: Any, payload: bytes, error: Callable[[str], Exception]) -> Any:
    """`decoder.decode(payload)`; any failure raises `error(reason)` with a one-line reason."""
    try:
        return decoder.decode(payload)
    except RecursionError:
        raise error("nested too deeply to decode") from None
    except DECODE_FAILURES as exc:
        raise error(one_line(exc)) from None


# msgpack type bytes -> (container entries per count, width of the count / length field)
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
_FIXEXT = {0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
_LENGTH = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}  # bin / str: length field width
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_CONTAINER = {0xDC: (1, 2), 0xDD: (1, 4), 0xDE: (2, 2), 0xDF: (2, 4)}  # array / map


def msgpack_depth_exceeds(payload: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether any value in `payload` nests deeper than `limit` containers (a truncated or
    malformed payload counts as not too deep: decoding will refuse it). Iterative, and it stops
    at the first level past `limit`; O(len(payload)) otherwise: meant for small payloads."""
    pending = [1]  # values still to read at each open level
    at, end = 0, len(payload)
    while pending and at < end:
        pending[-1] -= 1
        byte = payload[at]
        at += 1
        entries = 0
        if byte <= 0x7F or byte >= 0xE0:  # fixint
            pass
        elif byte <= 0x8F:
            entries = 2 * (byte & 0x0F)
        elif byte <= 0x9F:
            entries = byte & 0x0F
        elif byte <= 0xBF:
            at += byte & 0x1F
        elif byte in _FIXED:
            at += _FIXED[byte]
        elif byte in _FIXEXT:
            at += _FIXEXT[byte]
        elif byte in _LENGTH:
            width = _LENGTH[byte]
            at += width + int.from_bytes(payload[at : at + width], "big")
        elif byte in _EXT:
            width = _EXT[byte]
            at += width + 1 + int.from_bytes(payload[at : at + width], "big")
        elif byte in _CONTAINER:
            per, width = _CONTAINER[byte]
            entries = per * int.from_bytes(payload[at : at + width], "big")
            at += width
        else:
            return False  # 0xC1 is never used: malformed, the decoder says so
        if entries:
            if len(pending) > limit:
                return True
            pending.append(entries)
        while pending and pending[-1] == 0:
            pending.pop()
    return False
