"""What the inspector accumulates frame by frame: violations and each slot's history.

Frames are ingested in order on a worker thread (checks and diffs cost per frame, never on the
UI thread); the panels read from any thread under its lock. Slot history lets the slot
panel say who held a slot at earlier steps without rebuilding old states.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ..schema import CacheState, Delta, SlotClaim, SlotContent, SlotId, Step
from .source import FrameMeta
from .violations import Checker, ViolationRow

SLOT_HISTORY = 64
"""Changes kept per slot; older ones are dropped first."""
MAX_VIOLATIONS = 10_000
"""Violations kept; a fire hose of one bug must not eat the memory."""


@dataclass(frozen=True)
class SlotChange:
    """A slot's claims or contents changed at this frame."""

    frame: int
    step: Step
    claims: tuple[SlotClaim, ...]
    content: SlotContent | None
    """The fingerprint taken at this frame, if a new one was."""


class Findings:
    """Violations and slot history over the frames ingested so far."""

    def __init__(self, checker: Checker | None) -> None:
        self.checker = checker
        self._lock = threading.Lock()
        self._previous: CacheState | None = None
        self._next_frame = -1
        self._violations: deque[ViolationRow] = deque(maxlen=MAX_VIOLATIONS)
        self._in_order = True
        self._baseline: tuple[int, CacheState] | None = None
        """(frame, state) where slot history starts: every slot's claims there, without 10k
        history entries of their own."""
        self._slots: dict[SlotId, deque[SlotChange]] = {}

    @property
    def next_frame(self) -> int:
        """Index of the first frame not ingested yet (-1 before the first)."""
        return self._next_frame

    def ingest(self, frame: FrameMeta, state: CacheState, delta: Delta | None = None) -> list[ViolationRow]:
        """Take the next frame: diff its slots against the previous one and run the checks.
        `delta`: the stream delta that made `state` of the previous frame's, if known (the diff
        and the checks then read what changed from it)."""
        previous = self._previous
        if previous is not None and frame.index != self._next_frame:
            previous = None  # frames were skipped (left the history): no diff across the hole
        if previous is None:
            delta = None
        found = [ViolationRow(frame.index, v) for v in self.checker(previous, state, frame, delta)] if self.checker is not None else []
        changes = _slot_changes(previous, state, frame, delta) if previous is not None else []
        with self._lock:
            if previous is None:  # first frame, or after a hole: history restarts here
                self._baseline = (frame.index, state)
                self._slots.clear()
            for change_slot, change in changes:
                self._slots.setdefault(change_slot, deque(maxlen=SLOT_HISTORY)).append(change)
            self._violations.extend(found)
            self._previous = state
            self._next_frame = frame.index + 1
        return found

    def add(self, rows: list[ViolationRow]) -> None:
        """Violations found across ranks (tp-agree) at frames already ingested."""
        with self._lock:
            self._violations.extend(rows)
            self._in_order = False

    def violations(self) -> list[ViolationRow]:
        """Every violation kept, in frame order."""
        with self._lock:
            if not self._in_order:  # `add` appended rows of earlier frames
                self._violations = deque(sorted(self._violations, key=lambda row: row.frame), maxlen=MAX_VIOLATIONS)
                self._in_order = True
            return list(self._violations)

    def violations_at(self, frame: int) -> list[ViolationRow]:
        with self._lock:
            return [v for v in self._violations if v.frame == frame]

    def slot_history(self, slot: SlotId, up_to_frame: int) -> list[SlotChange]:
        """The slot's claims where history starts, then its changes, at frames <= up_to_frame."""
        with self._lock:
            if self._baseline is None or self._baseline[0] > up_to_frame:
                return []
            frame, state = self._baseline
            start = SlotChange(frame, Step(state.step), tuple(state.slots.get(slot, ())), state.contents.get(slot))
            return [start] + [c for c in self._slots.get(slot, ()) if c.frame <= up_to_frame]


def _slot_changes(previous: CacheState, state: CacheState, frame: FrameMeta, delta: Delta | None) -> list[tuple[SlotId, SlotChange]]:
    # Claim lists and contents are replaced, never edited, when a slot changes, so identity
    # settles most slots at once; equality covers states that were decoded separately. With the
    # delta only the slots it names can differ (a pass over 10k slots was ms a frame).
    old_slots, old_contents = previous.slots, previous.contents
    step = Step(state.step)
    changes = []
    if delta is None:
        slots: Iterable[SlotId] = state.slots
    else:
        named = {*delta.slots, *delta.contents, *delta.removed_contents}
        slots = [slot for slot in named if slot in state.slots]
    for slot in slots:
        claims = state.slots[slot]
        old = old_slots.get(slot)
        content = state.contents.get(slot)
        old_content = old_contents.get(slot)
        claims_changed = old is not claims and old != claims
        content_changed = content is not old_content and content != old_content
        if claims_changed or content_changed:
            changes.append((slot, SlotChange(frame.index, step, tuple(claims), content if content_changed else None)))
    return changes
