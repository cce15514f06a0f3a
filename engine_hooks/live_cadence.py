"""When the live stream captures: as often as the inspector's time budget allows.

A capture costs the scheduler thread 1-2 ms on the CPU demo (a tenth of a step or more),
whatever it catches up with; a person watching the TUI needs a few frames a second. So while
only live subscribers are connected (no one asked for EVERY_STEP_TOPIC), captures are paid
from a credit of inspector time: it grows by `budget` of the wall time and shrinks by all the
time the inspector spends (the hooks' per-call cost at every step first, captures and the
event hooks of their steps after), and a capture is planned only when the credit covers what
the last one cost. So over any stretch the inspector uses at most `budget` of the scheduler's
time, plus one capture. Bounds: at most one capture per `min_interval_s` (a view cannot show
more), at least one per `max_interval_s` (a view must not freeze; this one may overdraw the
credit, when the per-call cost alone is near the budget). Steps in between are counted as
unobserved: their events are gone, their state changes reach the client in the next capture.

The decision for a step is made at the boundary before it, so its hooks know whether to keep
evidence for it (`EventSink.observed`).
"""

from __future__ import annotations

DEFAULT_BUDGET = 0.008
"""Share of the scheduler thread's time the inspector may use while only live clients watch:
under 1%, because what the hooks' own timing cannot see (sglang's hook wrappers, the sender
thread's encoding) costs the engine a little more."""


class LiveCadence:
    """Plans captures for live subscribers. Scheduler thread only; times from perf_counter,
    `spent`: the inspector's total time so far (`ErrorCounter.seconds`)."""

    def __init__(self, budget: float = DEFAULT_BUDGET, min_interval_s: float = 0.1, max_interval_s: float = 1.0) -> None:
        self.budget = budget
        self.min_interval_s = min_interval_s
        self.max_interval_s = max_interval_s
        self._credit = 0.0
        """Inspector time the budget still allows (negative: overdrawn), at most one
        max_interval_s worth: an idle minute buys no burst."""
        self._updated_at: float | None = None
        self._spent_at = 0.0
        self._step_s = 0.0
        self._step_spent = 0.0
        self._captured_at = float("-inf")
        self._capture_cost = 0.0

    def captured(self, began: float, ended: float) -> None:
        """A capture ran from `began` to `ended` (the next one is expected to cost the same)."""
        self._captured_at = began
        self._capture_cost = ended - began

    def due_next(self, now: float, spent: float) -> bool:
        """At a step boundary: whether to capture at the next one, if the step now starting
        costs the inspector what the last one did."""
        self._earn(now, spent)
        return self._allows(now + self._step_s - self._captured_at, self._step_spent)

    def idle_due(self, now: float, spent: float) -> bool:
        """The engine is idle (sglang calls on_idle at every turn of its idle loop): whether to
        catch up now. The same credit: an idle moment may end with a request arriving."""
        self._earn(now, spent)
        return self._allows(now - self._captured_at, 0.0)

    def _earn(self, now: float, spent: float) -> None:
        if self._updated_at is None or now - self._updated_at > self.max_interval_s:
            # not asked for a while (nobody watched, or a client took every step): start afresh
            self._credit = self._step_s = self._step_spent = 0.0
        else:
            self._step_s, self._step_spent = now - self._updated_at, spent - self._spent_at
            earned = self._credit + self.budget * self._step_s - self._step_spent
            self._credit = min(earned, self.budget * self.max_interval_s)
        self._updated_at, self._spent_at = now, spent

    def _allows(self, window: float, coming: float) -> bool:
        """A capture `window` seconds after the last one began, `coming`: the inspector's time
        until then."""
        if window < self.min_interval_s:
            return False
        return window >= self.max_interval_s or self._credit - coming >= self._capture_cost
