"""EventSink: what the hooks leave for the next step boundary (events.py fills it, Capture and
the plugin read it). Slot ids stay tensors until `drain`, which converts them in one copy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcinspect.schema import Event, EvictEvent, NodeId, SlotId, Step

from .tensor_runs import IndexValue, ints_of_many


@dataclass(frozen=True)
class DeferredSlot:
    """A slot-id field still held as a tensor (or None): becomes an int at drain."""

    value: IndexValue


@dataclass(frozen=True)
class DeferredSlots:
    """A slot-list field still held as tensors: becomes a list of ints at drain."""

    values: Sequence[IndexValue]


@dataclass(frozen=True)
class DeferredValues:
    """A field of per-slot values (fingerprints, flags) still held as tensors: becomes a list
    of `cast(int)` at drain."""

    values: Sequence[IndexValue]
    cast: Callable[[int], Any] = int


@dataclass
class _Eviction:
    nodes: list[int] = field(default_factory=list)
    slots: list[IndexValue] = field(default_factory=list)
    tokens: int = 0

    def __bool__(self) -> bool:
        return bool(self.nodes or self.slots or self.tokens)


class EventSink:
    """What the hooks leave for the next step boundary. Scheduler thread only.

    - events: bounded (`max_events`); past the bound they are counted in `dropped_events`;
    - dirty node ids (Python tree core): nodes whose record may have changed;
    - `tombstones`: nodes whose mamba state sglang evicted (sglang keeps no such mark; a split
      parent also has no state but never had one);
    - `admission`: the slots `alloc_group_begin` pre-allocated while its group is open.

    Dirty marks are kept only while `tracking` (a Capture reads them); when more dirty nodes
    pile up than `max_dirty`, they are dropped and `overflowed` tells Capture to re-read
    everything.
    """

    def __init__(self, max_events: int = 10_000, max_dirty: int = 1_000_000) -> None:
        self.max_events = max_events
        self.max_dirty = max_dirty
        self.dropped_events = 0
        self.tracking = False
        self.overflowed = False
        self.dirty_nodes: set[int] = set()
        self.node_map: dict[int, Any] | None = None
        """MambaRadixCache's nodes by id, kept by mrc_marks' hooks (that cache has no arena of
        its own); None until its view walks the tree (first, and after a `reset()`)."""
        self.node_map_hooked = False
        """mrc_marks' hooks are bound: marks and `node_map` follow every change of a node."""
        self.tombstones: set[int] = set()
        self.admission: IndexValue = None
        self._pending: list[tuple[type, dict[str, Any]]] = []
        self._eviction = _Eviction()
        self._evict_depth = 0
        self.evicted_slots = 0
        """Mamba slots evictions freed from the tree, observed steps or not (for the stats)."""
        self.evicted_tokens = 0
        """KV tokens evictions freed, observed steps or not."""
        self.observed = True
        """Whether the current step will be captured (set by the inspector at each boundary):
        when not, its events are not kept and hooks whose only product is an event skip
        building it (evictions are still counted)."""
        self.request: Any = None
        """The request of the latest match / release / checkpoint: who a lock move is for."""
        self.checkpointing: Any = None

    # --- written by hooks ---

    def emit(self, cls: type, **fields: Any) -> None:
        """Queue event `cls(step=..., **fields)`; slot fields may still be DeferredSlot(s).
        Nothing is kept in a step nobody observes."""
        if not self.observed:
            return
        if len(self._pending) >= self.max_events:
            self.dropped_events += 1
            return
        self._pending.append((cls, fields))

    def mark(self, node_id: int) -> None:
        """The node's record may have changed (or the node is gone)."""
        if self.tracking:
            self.dirty_nodes.add(node_id)
            if len(self.dirty_nodes) > self.max_dirty:
                self.overflow()

    def mark_path(self, node: Any) -> None:
        """`node` and its ancestors (lock refs and match timestamps change along a path)."""
        while node is not None and self.tracking:
            self.mark(node.id)
            node = node.parent

    def overflow(self) -> None:
        """Marks no longer tell what changed (too many, or the tree was reset): re-read everything."""
        self.overflowed = True
        self.dirty_nodes.clear()

    def evicting(self, node_id: int) -> None:
        """A node lost a component value or left the tree during an eviction."""
        if self.observed:
            self._eviction.nodes.append(node_id)

    def evicted_values(self, mamba: Sequence[IndexValue], full_tokens: int) -> None:
        """One eviction step's freed tree slots and KV token count."""
        self.evicted_slots += sum(int(t.numel()) for t in mamba)
        self.evicted_tokens += full_tokens
        if not self.observed:
            return
        self._eviction.slots.extend(mamba)
        self._eviction.tokens += full_tokens
        if self._evict_depth == 0:  # an eviction outside evict(): path cap, host, SWA
            self._flush_eviction()

    def evict_begin(self) -> None:
        """An evict() call starts; nested calls join the outermost one's EvictEvent."""
        self._evict_depth += 1

    def evict_end(self) -> None:
        """An evict() call returned; the outermost one emits its EvictEvent."""
        self._evict_depth = max(0, self._evict_depth - 1)
        if self._evict_depth == 0:
            self._flush_eviction()

    def _flush_eviction(self) -> None:
        eviction = self._eviction
        if eviction:  # most steps evict nothing: no new _Eviction for them
            self._eviction = _Eviction()
            nodes = [NodeId(n) for n in dict.fromkeys(eviction.nodes)]
            self.emit(EvictEvent, nodes=nodes, slots=DeferredSlots(eviction.slots), tokens=eviction.tokens)

    # --- read at the step boundary ---

    def start_tracking(self) -> None:
        """A Capture is about to read everything: marks from now on are what changes after."""
        self.tracking = True
        self.overflowed = False
        self.dirty_nodes = set()

    def take_dirty_nodes(self) -> set[int]:
        """Node ids marked since the last take (may include removed nodes and other trees')."""
        dirty, self.dirty_nodes = self.dirty_nodes, set()
        return dirty

    def admission_slots(self) -> list[int]:
        """The open admission group's pre-allocated slots ([] when no group is open)."""
        return [] if self.admission is None else ints_of_many([self.admission])[0]

    def drain(self, step: Step) -> list[Event]:
        """The events since the last drain, stamped with `step` (one device copy for all)."""
        # An eviction whose after-hook never ran (it raised) is over by the step boundary.
        self._evict_depth = 0
        self._flush_eviction()
        pending, self._pending = self._pending, []
        return self._convert(pending, step) if pending else []

    def _convert(self, pending: list[tuple[type, dict[str, Any]]], step: Step) -> list[Event]:
        # Fields told apart by exact type through one dict lookup: isinstance against a union
        # of classes, for every field of every event, was most of a step's drain.
        # Each event's fields dict is its own (emit's **fields): the deferred ones are replaced in
        # it, the others not gone through twice.
        tensors: list[IndexValue] = []
        deferred: list[tuple[dict[str, Any], str, str, Any]] = []
        for _, fields in pending:
            for name, value in fields.items():
                kind = _DEFERRED.get(type(value))
                if kind is None:
                    continue
                deferred.append((fields, name, kind, value))
                if kind is _ONE:
                    tensors.append(value.value)
                else:
                    tensors.extend(value.values)
        ints = iter(ints_of_many(tensors))
        for fields, name, kind, value in deferred:
            if kind is _ONE:
                got = next(ints)
                fields[name] = SlotId(got[0] if got else -1)
            elif kind is _SLOTS:
                fields[name] = [SlotId(s) for _ in value.values for s in next(ints)]
            else:
                fields[name] = [value.cast(v) for _ in value.values for v in next(ints)]
        return [cls(step=step, **fields) for cls, fields in pending]


_ONE, _SLOTS, _VALUES = "slot", "slots", "values"
_DEFERRED: dict[type, str] = {DeferredSlot: _ONE, DeferredSlots: _SLOTS, DeferredValues: _VALUES}
"""The deferred field classes (exact types: none is subclassed) and how each becomes ints."""
