"""When the live stream captures: as often as the inspector's time budget allows.

A capture costs the scheduler thread ~1 ms on the CPU demo (a tenth of a step), whatever it
catches up with; a person watching the TUI needs a few frames a second. So while only live
subscribers are connected (no one asked for EVERY_STEP_TOPIC), a step is captured when the
inspector's whole time since the last capture, that capture included, stays within `budget`
of the scheduler's wall time: the hooks' own per-call cost comes first, captures get what is
left. Bounds: at most one capture per `min_interval_s` (a view cannot show more), at least one
per `max_interval_s` (a view must not freeze; this can exceed the budget when the per-call
cost alone exceeds it). Steps in between are counted as unobserved: their events are gone,
their state changes reach the client in the next capture.

The decision for a step is made at the boundary before it, so its hooks know whether to keep
evidence for it (`EventSink.observed`).
"""

from __future__ import annotations

DEFAULT_BUDGET = 0.01
"""Share of the scheduler thread's time the inspector may use while only live clients watch."""


class LiveCadence:
    """Plans captures for live subscribers. Scheduler thread only; times from perf_counter."""

    def __init__(self, budget: float = DEFAULT_BUDGET, min_interval_s: float = 0.1, max_interval_s: float = 1.0) -> None:
        self.budget = budget
        self.min_interval_s = min_interval_s
        self.max_interval_s = max_interval_s
        self._boundary_at: float | None = None
        self._spent_at_boundary = 0.0
        self._captured_at = float("-inf")
        self._spent_at_capture = 0.0

    def captured(self, began: float, spent: float) -> None:
        """A capture began at `began`; `spent`: the inspector's total time before it."""
        self._captured_at = began
        self._spent_at_capture = spent

    def idle_due(self, now: float, spent: float) -> bool:
        """The engine is idle (sglang calls on_idle at every turn of its idle loop): whether to
        catch up now. The same budget: an idle moment may end with a request arriving."""
        return self._allows(now - self._captured_at, spent)

    def due_next(self, now: float, spent: float) -> bool:
        """At a step boundary: whether to capture at the next one. `spent`: the inspector's
        total time so far (`ErrorCounter.seconds`)."""
        step_s = 0.0 if self._boundary_at is None else now - self._boundary_at
        step_spent = spent - self._spent_at_boundary
        self._boundary_at, self._spent_at_boundary = now, spent
        # From the last capture to the next boundary, if this step costs what the last one did.
        return self._allows(now + step_s - self._captured_at, spent + step_spent)

    def _allows(self, window: float, spent: float) -> bool:
        """A capture `window` seconds after the last one began, the inspector's total time
        then being `spent` (that capture included)."""
        if window < self.min_interval_s:
            return False
        return window >= self.max_interval_s or spent - self._spent_at_capture <= self.budget * window
