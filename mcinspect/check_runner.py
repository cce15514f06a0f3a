"""`mcinspect check`: run the checks over a snapshot file, a recording, or a live engine."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator

import msgspec

from .check_driver import CheckDriver
from .checks import Violation
from .checks.cross_rank import TP_AGREE, disagreements
from .rank_files import rank_paths
from .recording import RecordingReader, StepNotRecorded
from .replay import Replay
from .schema import CacheState, Counters, Delta, Snapshot, copy_state
from .session import FrameInfo, Session
from .snapshot_file import load_snapshot
from .sources import is_recording
from .target import Target


def check_file(path: str, names: Iterable[str] | None = None, on_warning: Callable[[str], None] = lambda m: None) -> Iterator[Violation]:
    """Violations in a snapshot file (one step) or a recording (every step, in order); with the
    recordings of other TP ranks beside it (rank_files.py), each rank's, then check `tp-agree`
    of each rank against rank 0 at every step both recorded. Raises CheckFailed if a check
    crashes, StepNotRecorded if a recording holds no whole frame; `on_warning` hears of a
    truncated recording or a seq gap."""
    driver = CheckDriver(names=names)  # an unknown name fails before any reading
    if not is_recording(path):
        yield from driver.step(load_snapshot(path).state, (), counters=Counters(), restart=True)
        return
    paths = rank_paths(path)
    per_rank = [_checked_states(p, names, on_warning) for p in paths]
    reference: dict[int, CacheState] = {}
    cross = names is None or TP_AGREE in set(names)
    for rank, states in enumerate(per_rank):
        for state, violations in states:
            for violation in violations:
                yield violation if rank == 0 else msgspec.structs.replace(violation, reason=f"rank {rank}: {violation.reason}")
            if rank == 0 and len(paths) > 1:
                reference[state.step] = state
            elif rank > 0 and cross and state.step in reference:
                yield from disagreements(state.step, reference[state.step], state, rank)


def _checked_states(
    path: str, names: Iterable[str] | None, on_warning: Callable[[str], None]
) -> Iterator[tuple[CacheState, list[Violation]]]:
    """Each frame's state of a recording with the violations the per-step checks find in it."""
    reader = RecordingReader(path, on_warning=on_warning)
    driver = CheckDriver(lambda: reader.info, names)
    replay = Replay(on_warning, path)
    frames = 0
    for index, frame in enumerate(reader):
        state = copy_state(replay.apply(index, frame))  # the views keep the previous state
        events = frame.events if isinstance(frame, Delta) else ()
        yield state, driver.step(state, events, counters=frame.counters, restart=isinstance(frame, Snapshot))
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
