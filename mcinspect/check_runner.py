"""`mcinspect check`: run the checks over a snapshot file, a recording, or a live engine."""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec

from .check_driver import CheckDriver
from .checks import Violation
from .checks.cross_rank import TP_AGREE
from .rank_agreement import RankAgreement
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
    recordings of other ranks beside it (rank_files.py), every rank's, read in lockstep, and
    check `tp-agree` of each rank against its reference rank at every step both recorded.
    Raises CheckFailed if a check crashes, StepNotRecorded if a recording holds no whole frame;
    `on_warning` hears of a truncated recording or a seq gap."""
    driver = CheckDriver(names=names)  # an unknown name fails before any reading
    if not is_recording(path):
        yield from driver.step(load_snapshot(path).state, (), counters=Counters(), restart=True)
        return
    readers = [RecordingReader(p, on_warning=on_warning) for p in rank_paths(path)]
    agreement = RankAgreement([r.info for r in readers]) if len(readers) > 1 and (names is None or TP_AGREE in set(names)) else None
    streams = [_by_step(rank, _checked_states(reader, names, on_warning)) for rank, reader in enumerate(readers)]
    for _, rank, state, frame, found in heapq.merge(*streams, key=lambda item: item[0]):
        for violation in found:
            yield _of_rank(violation, rank)
        if agreement is not None:
            yield from agreement.add(rank, state, frame)


def _by_step(
    rank: int, states: Iterator[tuple[CacheState, Delta | Snapshot, list[Violation]]]
) -> Iterator[tuple[tuple[int, int], int, CacheState, Delta | Snapshot, list[Violation]]]:
    """A rank's checked states keyed for the lockstep merge: by step, then rank (a reference
    rank's state comes before those compared with it)."""
    for state, frame, found in states:
        yield (state.step, rank), rank, state, frame, found


def _of_rank(violation: Violation, rank: int) -> Violation:
    """A per-rank check's violation, its reason naming the rank (rank 0's as they are)."""
    return violation if rank == 0 else msgspec.structs.replace(violation, reason=f"rank {rank}: {violation.reason}")


def _checked_states(
    reader: RecordingReader, names: Iterable[str] | None, on_warning: Callable[[str], None]
) -> Iterator[tuple[CacheState, Delta | Snapshot, list[Violation]]]:
    """Each frame's state of a recording, the frame, and the violations the per-step checks find in it."""
    driver = CheckDriver(lambda: reader.info, names)
    replay = Replay(on_warning, str(reader.path))
    frames = 0
    for index, frame in enumerate(reader):
        state = copy_state(replay.apply(index, frame))  # the views keep the previous state
        events = frame.events if isinstance(frame, Delta) else ()
        yield state, frame, driver.step(state, events, counters=frame.counters, restart=isinstance(frame, Snapshot), frame=frame)
        frames += 1
    if not frames:
        raise StepNotRecorded(f"{reader.path} holds no whole frame: nothing to check")


def check_live(
    targets: Sequence[Target],
    *,
    on_violation: Callable[[Violation], None],
    token: str = "",
    names: Iterable[str] | None = None,
    steps: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Check every step each rank of a live engine publishes (rank r at `targets[r]`, see
    ranks.discover), and `tp-agree` between the ranks, until rank 0 passed `steps` steps,
    `stop`, or Ctrl-C; returns the number of rank 0's frames checked."""
    stop = stop or threading.Event()
    checked = [0] * len(targets)
    sessions: list[Session] = []
    agreement: list[RankAgreement] = []
    cross = len(targets) > 1 and (names is None or TP_AGREE in set(names))

    def follow(rank: int, target: Target) -> Session:
        driver = CheckDriver(lambda: session.info, names)
        replay = Replay(name=f"{target.host}:{target.port}")

        def on_frame(info: FrameInfo, frame: Delta | Snapshot) -> None:
            state = copy_state(replay.apply(info.index, frame))
            for violation in driver.step(state, info.events, counters=frame.counters, restart=info.resync, frame=frame):
                on_violation(_of_rank(violation, rank))
            for violation in agreement[0].add(rank, state, frame) if agreement else ():
                on_violation(violation)
            checked[rank] += 1
            if rank == 0 and steps is not None and checked[0] > steps:
                stop.set()

        session = Session(target, token=token, on_frame=on_frame)
        return session

    try:
        for rank, target in enumerate(targets):
            sessions.append(follow(rank, target))
            sessions[-1].connect()
        if cross:
            agreement.append(RankAgreement([session.info for session in sessions]))
        while not stop.is_set():
            for session in sessions:
                session.poll(0.2 / len(sessions))
    finally:
        for session in sessions:
            session.close()
    return checked[0]
