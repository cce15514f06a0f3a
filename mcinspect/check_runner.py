"""`mcinspect check`: run the checks over a snapshot file, a recording, or a live engine."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

from .check_driver import CheckDriver
from .checks import Violation
from .recording import RecordingReader, StepNotRecorded
from .replay import Replay
from .schema import Counters, Delta, Snapshot, copy_state
from .session import FrameInfo, Session
from .snapshot_file import load_snapshot
from .sources import is_recording
from .target import Target


def check_file(path: str, names: Iterable[str] | None = None, on_warning: Callable[[str], None] = lambda m: None) -> Iterator[Violation]:
    """Violations in a snapshot file (one step) or a recording (every step, in order). Raises
    CheckFailed if a check crashes, StepNotRecorded if a recording holds no whole frame;
    `on_warning` hears of a truncated recording or a seq gap."""
    driver = CheckDriver(names=names)  # an unknown name fails before any reading
    if not is_recording(path):
        yield from driver.step(load_snapshot(path).state, (), counters=Counters(), restart=True)
        return
    reader = RecordingReader(path, on_warning=on_warning)
    driver = CheckDriver(lambda: reader.info, names)
    replay = Replay(on_warning, path)
    frames = 0
    for index, frame in enumerate(reader):
        state = copy_state(replay.apply(index, frame))  # the views keep the previous state
        events = frame.events if isinstance(frame, Delta) else ()
        yield from driver.step(state, events, counters=frame.counters, restart=isinstance(frame, Snapshot))
        frames += 1
    if not frames:
        raise StepNotRecorded(f"{path} holds no whole frame: nothing to check")


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
    stop = stop or threading.Event()
    checked = 0
    driver = CheckDriver(lambda: session.info, names)
    replay = Replay(name=f"{target.host}:{target.port}")

    def on_frame(info: FrameInfo, frame: Delta | Snapshot) -> None:
        nonlocal checked
        state = copy_state(replay.apply(info.index, frame))
        for violation in driver.step(state, info.events, counters=frame.counters, restart=info.resync):
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
