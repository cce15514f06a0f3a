"""Violations as the inspector lists them, and the one place that drives mcinspect.checks.

The checks are pure functions over a chain of `checks.StepView`s (mcinspect/checks); the
app feeds them frame by frame off the UI thread through a `Checker`, which wraps the one
check driver (check_driver.py) that `mcinspect check` uses too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..check_driver import CheckDriver
from ..checks import CheckFailed, Violation
from ..schema import CacheState, Delta, EngineInfo, NodeId, Rid, SlotId, Step
from .source import DataSource, FrameMeta


@dataclass(frozen=True)
class ViolationRow:
    """A violation and the frame it was found at (the frame is what time travel shows)."""

    frame: int
    violation: Violation

    @property
    def step(self) -> Step:
        return self.violation.step

    @property
    def check(self) -> str:
        return self.violation.check

    @property
    def reason(self) -> str:
        return self.violation.reason

    @property
    def node(self) -> NodeId:
        """The first node involved, -1 for none (what a jump selects)."""
        return self.violation.nodes[0] if self.violation.nodes else NodeId(-1)

    @property
    def slot(self) -> SlotId:
        return self.violation.slots[0] if self.violation.slots else SlotId(-1)

    @property
    def rid(self) -> Rid:
        return self.violation.rids[0] if self.violation.rids else Rid("")


Checker = Callable[[CacheState | None, CacheState, FrameMeta, Delta | None], list[Violation]]
"""(state at the previous frame, or None at the start or after a hole; state at this frame;
this frame; the stream delta that made this state of the previous one, if known) -> its
violations. Called once per frame, in frame order."""


def real_checks(source: DataSource) -> Checker:
    """All of mcinspect.checks for one rank's source (the app's `checks`)."""
    return checks_checker(source.engine)


def checks_checker(engine: Callable[[], EngineInfo | None]) -> Checker:
    """All of mcinspect.checks as a Checker (through the one driver, check_driver.py); `engine`
    gives the EngineInfo once known."""
    driver = CheckDriver(engine)

    def run(previous: CacheState | None, state: CacheState, frame: FrameMeta, delta: Delta | None) -> list[Violation]:
        try:
            restart = previous is None or frame.resync
            return driver.step(state, frame.events, counters=frame.engine, restart=restart, frame=delta)
        except CheckFailed as exc:  # a check choking on this state is itself worth a row
            return [Violation(check=exc.name, step=Step(exc.step), reason=f"the check failed on this step: {exc.__cause__!r}")]

    return run
