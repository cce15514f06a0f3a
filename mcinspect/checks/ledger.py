"""Per-slot history folded from events and states, so that checks of one step can ask about
earlier ones (when was this slot allocated, which write was planned into it last, which
fingerprint did it have while its node held it) in O(1), without walking back.

A `Ledger` describes the slots as of the previous step boundary; a `Timeline` replays one
step's events over it in order, so a check sees each event with the slot facts of that moment
(sglang's order inside a step matters: alloc -> plan -> donate -> free). `fold` turns a ledger,
a step's events and the state at its boundary into the next ledger: O(events + slots whose
claims or fingerprints changed), bounded by the mamba pool, never by the tree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..schema import (
    CacheState,
    Event,
    EvictEvent,
    InsertEvent,
    NodeId,
    SlotContent,
    SlotEvent,
    SlotId,
    Step,
    TrackPlanEvent,
    TrackWriteEvent,
)


@dataclass(frozen=True, slots=True)
class WriteFact:
    """A track write a forward ran (TrackWriteEvent): whose state, at which position."""

    rid: str
    """"" for a write no row of the batch planned."""
    position: int
    step: Step


@dataclass(frozen=True, slots=True)
class SlotFacts:
    """What is known about one slot at one moment."""

    owner: NodeId | None = None
    """Tree node holding the slot as its mamba value (-1: a tree node the Rust core does not
    show); None: not tree-owned."""
    owner_since: Step = Step(-1)
    """Step of the insert that gave `owner` the slot, or the step it was first seen owning it."""
    allocated_at: Step | None = None
    """Step of the last allocation seen; None when none was seen (it predates the history)."""
    plan: TrackPlanEvent | None = None
    """The latest write planned into the slot since its last allocation."""
    write: WriteFact | None = None
    """The latest track write a forward ran into the slot since its last allocation."""
    content: SlotContent | None = None
    """The latest fingerprint taken while `owner` held the slot."""


UNKNOWN = SlotFacts()


@dataclass(frozen=True)
class Ledger:
    """Slot facts as of one step boundary."""

    facts: Mapping[SlotId, SlotFacts] = field(default_factory=dict)
    known: bool = False
    """Ownership in `facts` was read from that boundary's state. False at the start of a
    history and after a gap: then only what this step's own events show is known."""

    def get(self, slot: SlotId) -> SlotFacts:
        return self.facts.get(slot, UNKNOWN)


class Timeline:
    """Slot facts while one step's events are applied in order (see `replay`)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.changed: dict[SlotId, SlotFacts] = {}
        self.moved: set[SlotId] = set()
        """Slots whose tree ownership an event of this step changed (insert, evict, free)."""

    def facts(self, slot: SlotId) -> SlotFacts:
        found = self.changed.get(slot)
        return found if found is not None else self.ledger.get(slot)

    def owner_known(self, slot: SlotId) -> bool:
        """Whether `facts(slot).owner` is fact rather than a default."""
        return self.ledger.known or slot in self.moved

    def apply(self, event: Event) -> None:
        if isinstance(event, SlotEvent):
            for slot in event.slots:
                if event.allocated:
                    # Ownership stays: an allocation does not end a tree claim; if the slot was
                    # tree-owned, that is the double claim the partition check reports.
                    self._set(slot, allocated_at=event.step, plan=None, write=None)
                else:
                    self._disown(slot)
        elif isinstance(event, EvictEvent):
            for slot in event.slots:
                self._disown(slot)
        elif isinstance(event, InsertEvent):
            self._set(event.slot, owner=event.node, owner_since=event.step, content=None)
            self.moved.add(event.slot)
        elif isinstance(event, TrackPlanEvent):
            self._set(event.slot, plan=event)
        elif isinstance(event, TrackWriteEvent):
            for slot, write in writes(event).items():
                self._set(slot, write=write)

    def _disown(self, slot: SlotId) -> None:
        self._set(slot, owner=None, content=None)
        self.moved.add(slot)

    def _set(self, slot: SlotId, **changes: object) -> None:
        self.changed[slot] = replace(self.facts(slot), **changes)


def replay(ledger: Ledger, events: Sequence[Event]) -> Iterator[tuple[Event, Timeline]]:
    """Each event with the timeline as it was just before the event."""
    timeline = Timeline(ledger)
    for event in events:
        yield event, timeline
        timeline.apply(event)


def after(ledger: Ledger, events: Sequence[Event]) -> Timeline:
    """The timeline once all of a step's events are applied."""
    timeline = Timeline(ledger)
    for event in events:
        timeline.apply(event)
    return timeline


def fold(
    end: Timeline, state: CacheState, owners: Mapping[SlotId, NodeId], changed: Iterable[SlotId], fingerprinted: Iterable[SlotId]
) -> Ledger:
    """The ledger at `state`'s boundary, from the step's timeline, the state's tree owners, the
    slots whose claims changed since the previous boundary (all slots at the start of a
    history) and those fingerprinted at it. Only slots that changed, were named by an event or
    got a new fingerprint are revisited: every other entry already describes them.

    The state is the authority on ownership: where it disagrees with the events (events were
    lost, or sglang moved a slot without a hook firing), ownership counts from this step and
    no earlier fingerprint is trusted as the slot's baseline.
    """
    step = state.step
    facts = dict(end.ledger.facts)
    facts.update(end.changed)
    contents = state.contents
    for slot in {*changed, *end.changed, *fingerprinted}:
        known = facts.get(slot, UNKNOWN)
        owner = owners.get(slot)
        if owner is None:
            if known.owner is not None:
                facts[slot] = replace(known, owner=None, content=None)
            continue
        if owner != known.owner:
            known = replace(known, owner=owner, owner_since=step, content=None)
        content = contents.get(slot)
        # A fingerprint older than the ownership shows what the slot held before its node.
        fresh = content is not None and content.step >= known.owner_since
        if fresh and (known.content is None or content.step > known.content.step):
            known = replace(known, content=content)
        facts[slot] = known
    return Ledger(facts, known=True)


def writes(event: TrackWriteEvent) -> dict[SlotId, WriteFact]:
    """Every slot the forward wrote, with the row that planned it (rid "" when none did)."""
    planned = {slot: (rid, position) for rid, on, slot, position in zip(event.rids, event.mask, event.planned, event.positions) if on}
    out = {}
    for slot in event.written_slots():
        rid, position = planned.get(slot, ("", -1))
        out[slot] = WriteFact(rid, position, event.step)
    return out
