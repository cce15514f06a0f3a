"""Recordings of a tensor-parallel engine: one file per rank, rank 0's at the path the user
gave and rank r's next to it (`run.mcrec`, `run.rank1.mcrec`, ...), recorded side by side."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from .recorder import RecordResult, record
from .target import Target

PORT_STRIDE = 2
"""Rank r's hooks listen on PORT + 2 * r (engine_hooks/config.py)."""


def rank_path(path: str, rank: int) -> str:
    """Where rank `rank`'s recording goes (rank 0: `path` itself)."""
    if rank == 0:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix}"))


def rank_paths(path: str) -> list[str]:
    """`path` and the other ranks' recordings beside it, in rank order (stops at the first gap)."""
    paths = [path]
    while Path(rank_path(path, len(paths))).exists():
        paths.append(rank_path(path, len(paths)))
    return paths


def record_ranks(
    target: Target,
    path: str,
    ranks: int,
    *,
    token: str = "",
    steps: int | None = None,
    stop: threading.Event | None = None,
    on_frame: Callable[[RecordResult], None] = lambda result: None,
) -> list[RecordResult]:
    """Record ranks 0..ranks-1 of the engine whose rank 0 is `target`, each on its own thread,
    until `steps`, `stop` or Ctrl-C; `on_frame` hears rank 0's frames. Raises the first error."""
    stop = stop or threading.Event()
    results: list[RecordResult | None] = [None] * ranks
    failures: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            where = Target(target.host, target.port + PORT_STRIDE * rank)
            results[rank] = record(
                where, rank_path(path, rank), token=token, steps=steps, stop=stop, on_frame=on_frame if rank == 0 else (lambda r: None)
            )
        except BaseException as exc:  # noqa: BLE001 - raised in the caller below
            failures.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(rank,), name=f"mcinspect-record-rank{rank}", daemon=True) for rank in range(1, ranks)]
    for thread in threads:
        thread.start()
    run(0)
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [r for r in results if r is not None]
