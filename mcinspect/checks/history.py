"""The input of every check: one step boundary, the step's events, and what came before.

A `StepView` holds the state at a step boundary, the events of the step that led to it, the
state at the previous boundary (when the two are contiguous) and a `Ledger` of per-slot facts
folded from all earlier steps. It keeps no chain of older views, so a live session can check
each new step forever in memory bounded by one state and the mamba pool:

    view = StepView.first(snapshot.state, engine=info)
    for frame in frames:                      # (state, FrameInfo) from the session
        whole = not frame.info.resync and frame.info.engine.dropped == dropped_before
        view = view.next(frame.state, frame.info.events, contiguous=whole)
        violations += check_step(view)

Derived indexes (tree owner of each slot, live requests, changed nodes, ...) are computed once
per view, on first use, and shared by all checks. States must not be mutated once given to a
view (the session's frames are copies).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..run_edits import as_runs, intervals
from ..schema import CacheState, Delta, EngineInfo, Event, NodeId, NodeRecord, RequestRecord, Rid, Runs, SlotId, Step
from .children import Children
from .kv_holders import KvHolders
from .ledger import Ledger, Timeline, after, fold

CARRIED = ("kv_holders", "children")
"""A view's indexes of the whole tree that the next view takes over, updated by its changes."""

LIVE_STATES = ("running", "chunked")
"""Request states that hold a KV row, a tree lock and mamba slots. "finished" requests may
still hold slots (sglang frees them when it processes the batch) and "waiting" ones hold none."""


@dataclass(frozen=True)
class StepView:
    """One step boundary as the checks see it."""

    state: CacheState
    events: tuple[Event, ...] = ()
    """What happened during the step that ended at `state` (in order)."""
    previous: CacheState | None = None
    """The state at the step boundary just before; None at the start of a history or after a gap."""
    ledger: Ledger = field(default_factory=Ledger)
    """Per-slot facts as of `previous` (empty and not `known` when `previous` is None)."""
    engine: EngineInfo | None = None
    """The engine's configuration when known (strategy, overlap); checks that need it skip
    what it would decide when it is None."""
    delta: Delta | None = None
    """The delta that made `state` of `previous`, when known: what changed is read from it, in
    O(the change), where comparing the two states is O(the tree) a step (100k nodes: ms)."""
    owners_before: Mapping[SlotId, NodeId] | None = field(default=None, repr=False, compare=False)
    """`previous`'s tree owners: this view's are those, moved by the slots that changed."""

    @classmethod
    def first(cls, state: CacheState, events: Sequence[Event] = (), engine: EngineInfo | None = None) -> StepView:
        """The first view of a history: nothing is known about earlier steps."""
        return cls(state=state, events=tuple(events), engine=engine)

    def next(self, state: CacheState, events: Sequence[Event] = (), *, contiguous: bool = True, delta: Delta | None = None) -> StepView:
        """The view of the following step. Pass `contiguous=False` after a gap (missed deltas,
        a resync) and when the step's events are incomplete (the engine's `Counters.dropped` or
        `hook_errors` grew during it): the new view then forgets the past instead of reasoning
        from events that are missing. `delta`: the one delta that made `state` of this view's
        (not after a gap: the changes of the deltas missed would not be seen)."""
        if not contiguous:
            return StepView.first(state, events, self.engine)
        ledger = fold(self.end, self.state, self.tree_owners, self.changed_slots, self.fingerprinted)
        view = StepView(
            state=state, events=tuple(events), previous=self.state, ledger=ledger, engine=self.engine, delta=delta,
            owners_before=self.tree_owners,
        )  # fmt: skip
        if delta is not None and delta.kv is None and self.__dict__.get("free_runs") is self.state.kv.free_runs:
            view.__dict__["free_runs"] = state.kv.free_runs  # sorted and disjoint: an edit keeps them so (run_edits.py)
        handed = {name: index for name in CARRIED if (index := self.__dict__.pop(name, None)) is not None}
        if handed:  # this view would rebuild them if asked again
            before = self.state.nodes
            changed = view.changed_nodes
            gone = [*view.removed_nodes, *(old for node in changed if (old := before.get(node.id)) is not None)]
            for name, index in handed.items():
                index.moved(gone, changed)
                view.__dict__[name] = index
        return view

    @property
    def step(self) -> Step:
        return self.state.step

    def find_node(self, node_id: NodeId) -> NodeRecord | None:
        """The node at this boundary, or at the previous one if it was removed since (an event
        may name a node that the same step evicted)."""
        node = self.state.nodes.get(node_id)
        if node is None and self.previous is not None:
            node = self.previous.nodes.get(node_id)
        return node

    # --- derived, computed once per view ---

    @cached_property
    def end(self) -> Timeline:
        """Slot facts after all of this step's events."""
        return after(self.ledger, self.events)

    @cached_property
    def tree_owners(self) -> dict[SlotId, NodeId]:
        """Tree-owned slot -> its (first) owner node, from the slot claims: the previous view's
        moved by the slots whose claims changed (a dict copy), or read from every slot."""
        slots = self.state.slots
        if self.owners_before is None:
            owners: dict[SlotId, NodeId] = {}
            read: Iterable[SlotId] = slots
        else:
            owners, read = dict(self.owners_before), self.changed_slots
        for slot in read:
            owner = next((claim.node for claim in slots.get(slot, ()) if claim.kind == "tree"), None)
            if owner is not None:
                owners[slot] = owner
            else:
                owners.pop(slot, None)
        return owners

    @cached_property
    def changed_contents(self) -> list[SlotId]:
        """Slots whose fingerprint record is new or different since `previous` (all when there
        is none)."""
        contents = self.state.contents
        if self.previous is None:
            return list(contents)
        before = self.previous.contents
        slots = self.delta.contents if self.delta is not None else contents
        return [slot for slot in slots if (now := contents.get(slot)) is not None and not _same(before.get(slot), now)]

    @cached_property
    def fingerprinted(self) -> list[SlotId]:
        """Slots fingerprinted at this boundary (a fingerprint stamped with its step)."""
        contents, step = self.state.contents, self.step
        return [slot for slot in self.changed_contents if contents[slot].step == step]

    @cached_property
    def root(self) -> NodeRecord | None:
        """The node without a parent (None if the state has no nodes)."""
        return next((node for node in self.state.nodes.values() if node.parent < 0), None)

    @cached_property
    def detailed(self) -> bool:
        """Nodes carry lock refs and LRU membership (sglang's Python tree core). The Rust core
        shows neither: its records carry -1 lock refs (adapter_0523.UNKNOWN)."""
        return self.root is not None and self.root.full_lock >= 0

    @cached_property
    def live(self) -> dict[Rid, RequestRecord]:
        """Requests that hold a KV row: running or chunked, with row >= 0. A retracted request
        can still sit in the last batch as "running", with its row already released."""
        return {rid: r for rid, r in self.state.requests.items() if r.state in LIVE_STATES and r.row >= 0}

    @cached_property
    def changed_nodes(self) -> list[NodeRecord]:
        """Nodes new or different since `previous` (all nodes when there is none). Records are
        immutable and shared between states, so identity tells unchanged ones apart."""
        if self.previous is None:
            return list(self.state.nodes.values())
        before, nodes = self.previous.nodes, self.state.nodes
        if self.delta is not None:
            ids = dict.fromkeys(node.id for node in self.delta.upsert_nodes)
            return [node for node_id in ids if (node := nodes.get(node_id)) is not None and not _same(before.get(node_id), node)]
        return [node for node_id, node in nodes.items() if not _same(before.get(node_id), node)]

    @cached_property
    def free_runs(self) -> Runs:
        """The KV free list as sorted, disjoint runs (what kv-pages bisects): the state's own
        when they are (checked at the start of a chain and whenever the list came whole, O(the
        list); a view whose state an edit made of such runs takes them as they are)."""
        runs = self.state.kv.free_runs
        normal = as_runs(intervals(runs))
        return runs if normal == runs else normal

    @cached_property
    def kv_holders(self) -> KvHolders:
        """Which nodes hold KV in which part of the pool (kv_holders.py). Like `children`, built
        at the first ask (O(the tree)), then handed from view to view (`CARRIED`) and updated by
        each step's changed nodes."""
        return KvHolders(self.state.nodes.values())

    @cached_property
    def children(self) -> Children:
        """Each node's children (children.py)."""
        return Children(self.state.nodes.values())

    @cached_property
    def removed_nodes(self) -> list[NodeRecord]:
        """Nodes of `previous` that are gone."""
        if self.previous is None:
            return []
        before, nodes = self.previous.nodes, self.state.nodes
        if self.delta is not None:
            ids = dict.fromkeys(self.delta.removed_nodes)
            return [node for node_id in ids if node_id not in nodes and (node := before.get(node_id)) is not None]
        return [node for node_id, node in before.items() if node_id not in nodes]

    @cached_property
    def changed_slots(self) -> list[SlotId]:
        """Slots whose claims are new or different since `previous` (all when there is none)."""
        if self.previous is None:
            return list(self.state.slots)
        before, slots = self.previous.slots, self.state.slots
        if self.delta is not None:
            return [slot for slot in self.delta.slots if slot in slots and not _same(before.get(slot), slots[slot])]
        return [slot for slot, claims in slots.items() if not _same(before.get(slot), claims)]

    @cached_property
    def changed_requests(self) -> list[RequestRecord]:
        """Requests new or different since `previous` (all when there is none)."""
        if self.previous is None:
            return list(self.state.requests.values())
        before, requests = self.previous.requests, self.state.requests
        if self.delta is not None:
            rids = dict.fromkeys([*(r.rid for r in self.delta.upsert_requests), *(g.rid for g in self.delta.grown_requests)])
            return [r for rid in rids if (r := requests.get(rid)) is not None and not _same(before.get(rid), r)]
        return [r for rid, r in requests.items() if not _same(before.get(rid), r)]


def _same(before: object, now: object) -> bool:
    """Identity first (states from one session share records), equality for states decoded
    separately (snapshot files)."""
    return before is now or before == now


def views(steps: Iterable[tuple[CacheState, Sequence[Event]]], engine: EngineInfo | None = None) -> Iterator[StepView]:
    """Views of consecutive steps (each item: the state at a boundary and the step's events).
    Split the input at gaps, or build views with `StepView.next(contiguous=False)`."""
    view: StepView | None = None
    for state, events in steps:
        view = StepView.first(state, events, engine) if view is None else view.next(state, events)
        yield view
