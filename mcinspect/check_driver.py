"""The one driver of mcinspect.checks: states in frame order -> each step's violations.

`check` (files and live engines), the TUI and the tests feed it; it keeps the chain of
`checks.StepView`s and restarts it wherever events may be incomplete (a resync, a drop, a hook
error, unobserved steps: `Counters.events_continue`), so no check reasons from missing events.
A check that crashes raises `checks.CheckFailed` naming it; what to do with that is the caller's
(`check` exits 2, the TUI shows a row).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .checks import StepView, Violation, check_step, select
from .schema import CacheState, Counters, Delta, EngineInfo, Event, Snapshot


class CheckDriver:
    """Checks one frame after another (states are kept by the views: never edit one after)."""

    def __init__(self, engine: Callable[[], EngineInfo | None] = lambda: None, names: Iterable[str] | None = None) -> None:
        """`engine` gives the EngineInfo once known; `names` picks checks (UnknownCheck at once)."""
        self._engine = engine
        self._names = [spec.name for spec in select(names)]
        self._view: StepView | None = None
        self._counters = Counters()
        self._seq: int | None = None

    def step(
        self, state: CacheState, events: Sequence[Event], *, counters: Counters, restart: bool, frame: Delta | Snapshot | None = None
    ) -> list[Violation]:
        """The violations at `state`; `restart`: it does not follow the previous state (a
        resync, or the first frame after a hole). `frame`: the message `state` came of; a Delta
        that follows the last frame's seq tells the checks what changed (StepView.delta)."""
        whole = not restart and counters.events_continue(self._counters)
        self._counters = counters
        last_seq, self._seq = self._seq, frame.seq if frame is not None else None
        if self._view is None:
            self._view = StepView.first(state, tuple(events), self._engine())
        else:
            self._view = self._view.next(state, tuple(events), contiguous=whole, delta=delta_after(last_seq, frame))
        return check_step(self._view, self._names)


def delta_after(last_seq: int | None, frame: Delta | Snapshot | None) -> Delta | None:
    """`frame` when it is the Delta right after seq `last_seq` (it then says all that changed
    since the frame of that seq), else None."""
    return frame if isinstance(frame, Delta) and last_seq is not None and frame.seq == last_seq + 1 else None
