"""Recordings of an engine with several ranks: one file per rank, rank 0's at the path the user
gave and rank r's next to it (`run.mcrec`, `run.rank1.mcrec`, ...)."""

from __future__ import annotations

from pathlib import Path

from .errors import McinspectError


class RankChoiceError(McinspectError):
    """--rank names a rank the engine or the recording does not have."""


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


def ranks_text(count: int) -> str:
    """`rank 0 only`, `ranks 0-3`."""
    return "rank 0 only" if count == 1 else f"ranks 0-{count - 1}"


def rank_file(path: str, rank: int) -> str:
    """`--rank N` of a recording: rank N's file beside `path`."""
    paths = rank_paths(path)
    if not 0 <= rank < len(paths):
        beside = f" (no {Path(rank_path(path, rank)).name} beside it)" if rank > 0 else ""
        raise RankChoiceError(f"--rank {rank}: {path} holds {ranks_text(len(paths))}{beside}")
    return paths[rank]
