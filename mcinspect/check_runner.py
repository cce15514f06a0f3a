"""`mcinspect check`: run the checks over a snapshot file, a recording, or a live engine."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from .checks import StepView, Violation, check_step, select
from .recording import RecordingReader
from .schema import CacheState, Counters, Delta, EngineInfo, Snapshot, apply_delta, copy_state
from .session import FrameInfo, Session
from .snapshot_file import load_snapshot
from .sources import is_recording
from .target import Target


class _Follower:
    """Turns a stream of frames (snapshots and deltas) into step views for the checks."""

    def __init__(self, engine: EngineInfo | None) -> None:
        self.engine = engine
        self.state: CacheState | None = None
        self.view: StepView | None = None
        self.counters = Counters()

    def advance(self, frame: Delta | Snapshot) -> StepView:
        if isinstance(frame, Snapshot):  # first frame, or a resync: the steps in between are unknown
            self.state = copy_state(frame.state)
            whole, events = False, ()
        else:
            assert self.state is not None, "a recording or stream starts with a snapshot"
            self.state = copy_state(self.state)  # views keep the previous state: never edit it
            apply_delta(self.state, frame)
            whole = frame.counters.events_continue(self.counters)
            events = tuple(frame.events)
        self.counters = frame.counters
        if self.view is None:
            self.view = StepView.first(self.state, events, self.engine)
        else:
            self.view = self.view.next(self.state, events, contiguous=whole)
        return self.view


def check_file(path: str, names: Iterable[str] | None = None) -> Iterator[Violation]:
    """Violations in a snapshot file (one step) or a recording (every step, in order)."""
    chosen = [spec.name for spec in select(names)]  # an unknown name fails before any reading
    if not is_recording(path):
        yield from check_step(StepView.first(load_snapshot(path).state), chosen)
        return
    reader = RecordingReader(path)
    follower = _Follower(reader.info)
    for frame in reader:
        yield from check_step(follower.advance(frame), chosen)


def check_live(
    target: Target,
    *,
    on_violation: Callable[[Violation], None],
    token: str = "",
    names: Iterable[str] | None = None,
    steps: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Check every step a live engine publishes until `steps` steps, `stop`, or Ctrl-C;
    returns the number of frames checked."""
    chosen = [spec.name for spec in select(names)]
    stop = stop or threading.Event()
    checked = 0
    follower: _Follower | None = None

    def on_frame(info: FrameInfo, frame: Delta | Snapshot) -> None:
        nonlocal follower, checked
        follower = follower or _Follower(session.info)
        for violation in check_step(follower.advance(frame), chosen):
            on_violation(violation)
        checked += 1
        if steps is not None and checked > steps:
            stop.set()

    session = Session(target, token=token, on_frame=on_frame)
    try:
        session.connect()
        while not stop.is_set():
            session.poll(0.2)
    finally:
        session.close()
    return checked
