"""A capture spread over steps: what a catch-up has read so far and not yet published.

A capture that must read many nodes (the first one after the tree grew while nobody watched,
a dirty-mark overflow, a tree `reset()`) would cost the scheduler thread a second per 100k
nodes in one step. Instead `Capture.step` reads them in chunks, a time budget a step
(CATCH_UP_BUDGET_S), and publishes nothing until the last chunk: then one delta carries all
of it. (Not on 0.5.16, whose tree is walked afresh at each capture, nor on MambaRadixCache
without its dirty-mark hooks: without marks, nothing says which nodes moved while the read was
spread, so each capture reads the whole tree in its own step; O(tree) a capture there, as their
hook tables say. With them, mrc_marks.py keeps MambaRadixCache's nodes as an arena: spread.)
Meanwhile:

- the O(tree) parts are bulk work read in chunks like the rest, never in one step: the nodes to
  sweep (every node after an overflow or a `reset()`, the arena's tail after the tree grew
  unwatched), the baseline's nodes to check for removal (`gone`), the slots that entered or
  left the free list and every slot after an overflow (`slot_sweep`); the bulk goes before the
  marks, which arrive every step and would otherwise take every step's budget. Not even a list
  of the bulk is made in one step: it is a range of ids (sglang counts node ids up), the
  baseline's frozen shards, or a numpy array (`Bulk`), sliced a chunk at a time;
- a node or slot read from the bulk drops its pending mark (the marks so far are changes up to
  now; a later change marks it again): a tree grown unwatched has every new node both marked
  and in the arena's tail;
- after an overflow any baseline depth may be stale (the marks of splits were dropped): until
  the sweep is done, only the depths of nodes read in this catch-up are trusted (`stale_depths`);
- the baseline moves chunk by chunk (nodes, tree slot index and owners, slot claims), so a node read early
  and changed later is read again: the hooks mark it, and marks join `todo`;
- slot claims are rebuilt from the baseline's requests and admission slots, which only the
  last step moves (the slots whose inputs changed meanwhile are rebuilt then), and from the
  free list, which each step moves (a tree that filled up unwatched took every slot: too many
  to rebuild in one step);
- snapshots serve the state of the last published capture (`CatchUp.published`: the baseline's
  shards frozen when the catch-up started, which the baseline copies before it changes them:
  cow_map.py), so a snapshot always matches the stream up to its seq.

The last step reads what is left (a few marks) with everything else, as any step does: the
delta is the difference between the last published state and the state at that step.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mcinspect.schema import NodeId, NodeRecord, SlotClaim, SlotId

from .published_state import PublishedState

CATCH_UP_BUDGET_S = 0.007
"""Scheduler-thread time a catch-up may take per step (a step is ~10 ms on the CPU demo): no
chunk begins that would end past it (Capture._advance). At 5 ms a 100k-node tree took over 3 s
to catch up; the budget was overrun by up to 2x before chunks were timed ahead."""
IMMEDIATE_NODES = 256
"""Up to this many nodes to read, a step reads them at once (a few ms); more start a catch-up."""
NODE_CHUNK = 64
"""Nodes read between two looks at the clock."""
SLOT_CHUNK = 256
"""Slot claim lists rebuilt between two looks at the clock."""


Part = Sequence[int] | np.ndarray | Mapping[int, Any]
"""Ids of a Bulk: a list, range or numpy array (sliced), or the keys of a dict nobody changes
(a frozen shard: cow_map.py)."""


class Bulk:
    """Ids to go through in order, a chunk at a time, each part sliced (in C), never copied or
    joined id by id (a part may hold every node or slot)."""

    def __init__(self, *parts: Part) -> None:
        self._parts: deque[Part] = deque(part for part in parts if len(part))
        self._next = 0
        """Position in the first part."""

    def __len__(self) -> int:
        return sum(map(len, self._parts)) - self._next

    def add(self, ids: Part) -> None:
        """Go through `ids` after what is already here (kept as it is: not copied)."""
        if len(ids):
            self._parts.append(ids)

    def take(self, n: int) -> Sequence[int]:
        """Up to `n` next ids (fewer only at the end of a part)."""
        if not self._parts:
            return []
        part = self._parts[0]
        if isinstance(part, Mapping):
            chunk: Sequence[int] | np.ndarray = list(itertools.islice(part, self._next, self._next + n))
        else:
            chunk = part[self._next : self._next + n]
        self._next += len(chunk)
        if self._next >= len(part):
            self._parts.popleft()
            self._next = 0
        return chunk.tolist() if isinstance(chunk, np.ndarray) else chunk


@dataclass
class CatchUp:
    published: PublishedState
    """The last published capture (frozen: nothing is copied when the catch-up starts, a
    100k-node copy is tens of ms on the scheduler thread)."""
    todo: set[int] = field(default_factory=set)
    """Node ids still to read: marked, or new since the last step."""
    sweep: Bulk = field(default_factory=Bulk)
    """Node ids to read in bulk: the arena after an overflow, its tail after the tree grew unwatched."""
    gone: Bulk = field(default_factory=Bulk)
    """Baseline node ids to check for removal (after an overflow: the marks of removals were dropped)."""
    stale_depths: bool = False
    """The baseline's depths may be stale: trust only those of the nodes in `fresh`."""
    fresh: set[int] = field(default_factory=set)
    """Nodes read in this catch-up since `stale_depths` was set."""
    slots: set[int] = field(default_factory=set)
    """Slots whose claim lists still need rebuilding (their tree owner may have moved)."""
    slot_sweep: Bulk = field(default_factory=Bulk)
    """Slots to rebuild in bulk (every slot after an overflow)."""
    upserts: dict[NodeId, NodeRecord] = field(default_factory=dict)
    removed: set[NodeId] = field(default_factory=set)
    claims: dict[SlotId, tuple[SlotClaim, ...]] = field(default_factory=dict)
    """Slots whose claim list changed, with the new list."""
    owner_changes: set[int] = field(default_factory=set)
    """Slots whose tree owner changed during the catch-up (Capture.owner_changes)."""
    steps: int = 0
    slot_chunk_s: float = 0.0
    """How long the last chunk of slots took to rebuild (the node reads leave room for one)."""
    publish_next: bool = False
    """The last reads filled a step: the publishing (the delta's wrap-up and the contents of
    every slot that moved, several ms each at 100k nodes) waits for the next step, once."""

    def mark(self, marks: set[int], tail: Sequence[int], everything: bool, baseline: list[Mapping[int, Any]]) -> None:
        """Add a step's nodes to read: `marks`, the arena's `tail` (new since the last step), or with
        `everything` the whole arena as `tail` and the ids of the `baseline`'s frozen shards to
        check for removal."""
        if len(marks) > len(self.todo):  # the hooks' set of a tree grown unwatched: adopt it, not copy it
            self.todo, marks = marks, self.todo
        self.todo |= marks
        if everything:
            self.sweep, self.gone = Bulk(tail), Bulk(*baseline)
            self.stale_depths, self.fresh = True, set()
        elif len(tail) > IMMEDIATE_NODES:
            self.sweep.add(tail)
        else:
            self.todo.update(tail)

    def next_nodes(self, arena: dict[int, Any]) -> Sequence[int] | None:
        """The next chunk of node ids to read (the bulk first), None when none is left."""
        if self.sweep:
            chunk = self.sweep.take(NODE_CHUNK)
            # Read now: the marks so far are these nodes' changes up to now (a later change marks
            # them again). A tree grown unwatched has every new node both marked and in the tail.
            self.todo.difference_update(chunk)
            if not self.sweep:  # every node of the arena at the overflow has been read again
                self.stale_depths, self.fresh = False, set()
            return chunk
        if self.gone:
            return [n for n in self.gone.take(NODE_CHUNK) if n not in arena]
        if self.todo:
            return [self.todo.pop() for _ in range(min(NODE_CHUNK, len(self.todo)))]
        return None

    def next_slots(self) -> Sequence[int] | None:
        """The next chunk of slots to rebuild (the bulk first), None when none is left."""
        if self.slot_sweep:
            chunk = self.slot_sweep.take(SLOT_CHUNK)
            self.slots.difference_update(chunk)  # rebuilt now: a later move of its inputs adds it again
            return chunk
        if self.slots:
            return [self.slots.pop() for _ in range(min(SLOT_CHUNK, len(self.slots)))]
        return None

    @property
    def done(self) -> bool:
        return not (self.todo or self.sweep or self.gone or self.slots or self.slot_sweep)

    def trusted_depth(self, node_id: int) -> bool:
        """Whether the baseline's depth of `node_id` (not marked since it was read) is current."""
        return not self.stale_depths or node_id in self.fresh

    def read(self, upserts: list[NodeRecord], removed: list[NodeId]) -> None:
        for record in upserts:
            self.upserts[record.id] = record
            self.removed.discard(record.id)
        for node_id in removed:
            self.upserts.pop(node_id, None)
            self.removed.add(node_id)
