"""Freeing a big snapshot in pieces with rests, on the request thread.

Dropping the last reference to a 100k-node Snapshot frees its dicts and every record no longer
shared with the live state in one go: 10-25 ms of GIL in a single bytecode of the request
thread (the bench's `--gil-holds`), which the scheduler thread waits out. Here the snapshot's big
dicts are emptied CHUNK entries at a time with rests (as rested_encode.py encodes), but only
when the caller held the last reference to them: a snapshot someone else still holds is left
whole.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from mcinspect.schema import Snapshot

from .rested_encode import CHUNK, REST_RATIO

_STATE_FIELDS = ("nodes", "slots", "requests", "contents")

_ONLY_OURS = 2
"""`sys.getrefcount` of an object held by one local name only (the call's argument adds one)."""


def free_rested(doomed: list[Snapshot], rest: Callable[[float], None] = time.sleep) -> int:
    """Take the snapshot out of `doomed` (the caller's only reference) and free it a piece at a
    time; returns the entries freed that way (0: someone else holds it, or it was small)."""
    snapshot = doomed.pop()
    if sys.getrefcount(snapshot) > _ONLY_OURS:
        return 0
    state = snapshot.state
    del snapshot  # the state's only holder now is `state`, if nobody else kept it
    if sys.getrefcount(state) > _ONLY_OURS:
        return 0
    freed = 0
    for name in _STATE_FIELDS:
        entries = getattr(state, name)
        if len(entries) <= CHUNK or sys.getrefcount(entries) > _ONLY_OURS + 1:  # + the state's field
            continue
        while entries:
            began = time.perf_counter()
            for _ in range(min(CHUNK, len(entries))):
                entries.popitem()  # the record goes with it when this was its last holder
            freed += CHUNK
            rest((time.perf_counter() - began) * REST_RATIO)
    return freed
