"""`mcinspect record`: follow a live engine and append every frame to a recording (every rank's
to its own file, rank_files.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .rank_files import rank_path
from .recording import RecordingWriter
from .schema import Delta, Snapshot
from .session import FrameInfo, Session
from .target import Target


@dataclass
class RecordResult:
    frames: int = 0
    resyncs: int = 0
    first_step: int = -1
    last_step: int = -1


def record(
    target: Target,
    path: str,
    *,
    token: str = "",
    steps: int | None = None,
    stop: threading.Event | None = None,
    on_frame: Callable[[RecordResult], None] = lambda result: None,
) -> RecordResult:
    """Record until `steps` steps past the first snapshot, `stop` is set, or Ctrl-C.

    Each frame is written (and flushed) as the session applies it, so a crash loses at most
    the frame being written; resyncs are written as snapshots."""
    result = RecordResult()
    stop = stop or threading.Event()
    writer: RecordingWriter | None = None

    def write(info: FrameInfo, source: Delta | Snapshot) -> None:
        nonlocal writer
        if writer is None:
            writer = RecordingWriter(path, session.info)
        writer.write(source)
        result.frames += 1
        result.resyncs += info.resync and result.frames > 1
        result.first_step = info.step if result.first_step < 0 else result.first_step
        result.last_step = info.step
        if steps is not None and result.last_step - result.first_step >= steps:
            stop.set()
        on_frame(result)

    session = Session(target, token=token, on_frame=write)
    try:
        session.connect()
        while not stop.is_set():
            session.poll(0.2)
    finally:
        session.close()
        if writer is not None:
            writer.close()
    return result


def record_ranks(
    targets: Sequence[Target],
    path: str,
    *,
    token: str = "",
    steps: int | None = None,
    stop: threading.Event | None = None,
    on_frame: Callable[[RecordResult], None] = lambda result: None,
) -> list[RecordResult]:
    """Record every rank of an engine, rank r (at `targets[r]`) to `rank_path(path, r)`, each
    on its own thread, until `steps`, `stop` or Ctrl-C; `on_frame` hears rank 0's frames.
    Raises the first error (the others then stop too)."""
    stop = stop or threading.Event()
    results: list[RecordResult | None] = [None] * len(targets)
    failures: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            heard = on_frame if rank == 0 else (lambda result: None)
            results[rank] = record(targets[rank], rank_path(path, rank), token=token, steps=steps, stop=stop, on_frame=heard)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller below
            failures.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=run, args=(rank,), name=f"mcinspect-record-rank{rank}", daemon=True) for rank in range(1, len(targets))
    ]
    for thread in threads:
        thread.start()
    run(0)
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [r for r in results if r is not None]
