"""Freeing a big snapshot in pieces with rests, on the request thread.

Dropping the last reference to a 100k-node Snapshot frees its dicts and every record no longer
shared with the live state in one go: 10-25 ms of GIL in a single bytecode of the request
thread (the bench's `--gil-holds`), which the scheduler thread waits out. Here the snapshot's big
dicts (a Snapshot's maps; SnapshotParts' contents and the frozen shards of its maps, which the
live maps stopped sharing when they changed them: cow_map.py) are emptied CHUNK entries at a
time with rests (as rested_encode.py encodes), each only when the caller held the last reference
to it: a dict someone else still holds is left whole.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from mcinspect.schema import Snapshot

from .published_state import SnapshotParts
from .rested_encode import CHUNK, REST_RATIO, STATE_FIELDS

_ONLY_OURS = 2
"""`sys.getrefcount` of an object held by one local name only (the call's argument adds one)."""


def free_rested(doomed: list[Snapshot | SnapshotParts], rest: Callable[[float], None] = time.sleep) -> int:
    """Take the snapshot out of `doomed` (the caller's only reference) and free it a piece at a
    time; returns the entries freed that way (0: someone else holds it, or it was small)."""
    snapshot = doomed.pop()
    if sys.getrefcount(snapshot) > _ONLY_OURS:
        return 0
    held = _dicts_of(snapshot)
    del snapshot  # each dict's only holder now is `held`, if nobody else kept it
    freed = 0
    while held:
        entries = held.pop()
        if len(entries) <= CHUNK or sys.getrefcount(entries) > _ONLY_OURS:
            continue
        while entries:
            began = time.perf_counter()
            count = min(CHUNK, len(entries))
            for _ in range(count):
                entries.popitem()  # the record goes with it when this was its last holder
            freed += count
            rest((time.perf_counter() - began) * REST_RATIO)
    return freed


def _dicts_of(snapshot: Snapshot | SnapshotParts) -> list[dict[Any, Any]]:
    if isinstance(snapshot, SnapshotParts):
        published = snapshot.published
        return [*published.nodes.shards(), *published.slots.shards(), snapshot.contents]
    state = snapshot.state
    return [getattr(state, name) for name in STATE_FIELDS]
