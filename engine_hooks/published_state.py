"""The state of the last published capture as the request thread takes it: frozen shards
(cow_map.py), taken under the inspector's lock in O(shards). A snapshot is encoded outside the
lock straight from those shards, a piece at a time (SnapshotParts, rested_encode.py): no single
call holds the GIL for a tree's worth of copying, and no tree-sized dict is built for it."""

from __future__ import annotations

from dataclasses import dataclass

from mcinspect.schema import (
    CacheState,
    Counters,
    KvState,
    NodeId,
    NodeRecord,
    RequestRecord,
    Rid,
    Seq,
    SlotClaim,
    SlotContent,
    SlotId,
    Step,
)

from .cow_map import Frozen


@dataclass(frozen=True)
class PublishedState:
    step: Step
    nodes: Frozen[NodeId, NodeRecord]
    slots: Frozen[SlotId, tuple[SlotClaim, ...]]
    requests: dict[Rid, RequestRecord]
    """The capture's own dict, which it replaces (never changes) at each step (a few hundred)."""
    kv: KvState

    def to_cache_state(self) -> CacheState:
        """The CacheState (new dicts; the records are shared), built at once on the calling
        thread (Capture.state, the scheduler's: it must not rest; snapshots are not built so)."""
        return CacheState(
            step=self.step,
            nodes=self.nodes.to_dict(_at_once),
            slots=self.slots.to_dict(_at_once),  # type: ignore[arg-type]  # tuples encode as the schema's lists
            requests=dict(self.requests),
            kv=self.kv,
        )


@dataclass(frozen=True)
class SnapshotParts:
    """A Snapshot as the request thread takes it, for `encode_rested`, which encodes the frozen
    maps a shard at a time. Copied into dicts first, the slot map was a 100k-entry dict of
    new claim tuples that the cyclic GC walked at each young collection while it was
    encoded: gen-1 pauses of 7-11 ms on whichever thread allocated, the scheduler's too."""

    seq: Seq
    published: PublishedState
    contents: dict[SlotId, SlotContent]
    """The slots' contents with the verifier's overlay (records the GC does not track)."""
    counters: Counters


def _at_once(seconds: float) -> None:
    """No rest between shards."""
