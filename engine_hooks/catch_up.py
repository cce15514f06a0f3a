"""A capture spread over steps: what a catch-up has read so far and not yet published.

A capture that must read many nodes (the first one after the tree grew while nobody watched,
a dirty-mark overflow, a tree `reset()`) would cost the scheduler thread a second per 100k
nodes in one step. Instead `Capture.step` reads them in chunks, a time budget a step
(CATCH_UP_BUDGET_S), and publishes nothing until the last chunk: then one delta carries all
of it. Meanwhile:

- the baseline moves chunk by chunk (nodes, tree slot index and owners, slot claims), so a node read early
  and changed later is read again: the hooks mark it, and marks join `todo`;
- slot claims are rebuilt from the baseline's requests and admission slots, which only the
  last step moves (the slots whose inputs changed meanwhile are rebuilt then), and from the
  free list, which each step moves (a tree that filled up unwatched took every slot: too many
  to rebuild in one step);
- snapshots serve the state of the last published capture (`CatchUp.published`: the baseline
  with what the catch-up changed put back), so a snapshot always matches the stream up to its seq.

The last step reads what is left (a few marks) with everything else, as any step does: the
delta is the difference between the last published state and the state at that step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from mcinspect.schema import CacheState, KvState, NodeId, NodeRecord, RequestRecord, Rid, SlotClaim, SlotId, Step

CATCH_UP_BUDGET_S = 0.005
"""Scheduler-thread time a catch-up may take per step (a step is ~10 ms on the CPU demo)."""
IMMEDIATE_NODES = 256
"""Up to this many nodes to read, a step reads them at once (a few ms); more start a catch-up."""
NODE_CHUNK = 64
"""Nodes read between two looks at the clock."""
SLOT_CHUNK = 256
"""Slot claim lists rebuilt between two looks at the clock."""

K = TypeVar("K")
V = TypeVar("V")


@dataclass
class CatchUp:
    step: Step
    """The last published capture's step, requests and KV state (the baseline replaces, never
    changes, those objects until the catch-up is done)."""
    requests: dict[Rid, RequestRecord]
    kv: KvState | None
    todo: set[int] = field(default_factory=set)
    """Node ids still to read (marked, new, or all of them after an overflow)."""
    slots: set[int] = field(default_factory=set)
    """Slots whose claim lists still need rebuilding (their tree owner may have moved)."""
    upserts: dict[NodeId, NodeRecord] = field(default_factory=dict)
    removed: set[NodeId] = field(default_factory=set)
    claims: dict[SlotId, tuple[SlotClaim, ...]] = field(default_factory=dict)
    """Slots whose claim list changed, with the new list."""
    owner_changes: set[int] = field(default_factory=set)
    """Slots whose tree owner changed during the catch-up (Capture.owner_changes)."""
    steps: int = 0
    saved_nodes: dict[NodeId, NodeRecord | None] = field(default_factory=dict)
    """The published record of each node the baseline changed since (None: it had none). The
    published state is the baseline with these put back: nothing is copied when the catch-up
    starts (a 100k-node copy is tens of ms on the scheduler thread)."""
    saved_slots: dict[SlotId, tuple[SlotClaim, ...] | None] = field(default_factory=dict)

    def read(self, upserts: list[NodeRecord], removed: list[NodeId]) -> None:
        for record in upserts:
            self.upserts[record.id] = record
            self.removed.discard(record.id)
        for node_id in removed:
            self.upserts.pop(node_id, None)
            self.removed.add(node_id)

    def save_node(self, nodes: dict[NodeId, NodeRecord], node_id: NodeId) -> None:
        """Call before the baseline's `nodes` changes `node_id`."""
        if node_id not in self.saved_nodes:
            self.saved_nodes[node_id] = nodes.get(node_id)

    def save_slot(self, slots: dict[SlotId, tuple[SlotClaim, ...]], slot: SlotId) -> None:
        """Call before the baseline's `slots` changes `slot`."""
        if slot not in self.saved_slots:
            self.saved_slots[slot] = slots.get(slot)

    def published(self, nodes: dict[NodeId, NodeRecord], slots: dict[SlotId, tuple[SlotClaim, ...]]) -> CacheState:
        """The last published state (new dicts), from the baseline's `nodes` and `slots`."""
        return CacheState(
            step=self.step,
            nodes=_restored(nodes, self.saved_nodes),
            slots=_restored(slots, self.saved_slots),
            requests=dict(self.requests),
            kv=self.kv,
        )


def _restored(now: dict[K, V], saved: dict[K, V | None]) -> dict[K, V]:
    out = dict(now)
    for key, value in saved.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
