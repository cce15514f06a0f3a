"""Where a command's cache states come from: a snapshot file, a recording, or a live engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .errors import McinspectError
from .rank_files import rank_file
from .recording import MAGIC, RecordingReader
from .schema import CacheState, EngineInfo, Step
from .snapshot_file import load_snapshot
from .target import TargetError, parse_targets


class SourceError(McinspectError):
    """SOURCE is none of: a snapshot file, a recording, PORT or HOST:PORT."""


@dataclass(frozen=True)
class LoadedState:
    state: CacheState
    info: EngineInfo | None
    origin: str
    """For messages: 'snap.json', 'run.mcrec at step 40', '127.0.0.1:7777'."""


def is_recording(path: str) -> bool:
    with open(path, "rb") as file:
        return file.read(len(MAGIC)) == MAGIC


def load_state(
    source: str,
    *,
    step: int | None = None,
    token: str = "",
    timeout_s: float = 10.0,
    on_warning: Callable[[str], None] | None = None,
    rank: int | None = None,
) -> LoadedState:
    """The state SOURCE designates (a recording's last step unless `step`), of rank `rank` (a
    recording's rank file beside it, or a live engine's rank; default 0); raises the loaders'
    own one-line errors (SnapshotFileError, RecordingError, EngineUnreachable, RankChoiceError,
    ...); `on_warning` hears of a truncated recording."""
    if os.path.exists(source):
        if is_recording(source):
            path = rank_file(source, rank or 0)
            reader = RecordingReader(path, on_warning=on_warning)
            if step is None:
                last = reader.last_state()
                return LoadedState(last.state, reader.info, f"{path} at step {last.state.step}")
            return LoadedState(reader.state_at(Step(step)), reader.info, f"{path} at step {step}")
        if step is not None:
            raise SourceError(f"--step applies to recordings; {source} is a snapshot")
        if rank:
            raise SourceError(f"--rank applies to recordings and live engines; {source} is one rank's snapshot")
        return LoadedState(load_snapshot(source).state, None, source)
    try:
        targets = parse_targets(source)
    except TargetError:
        raise SourceError(f"{source!r} is not a file, nor PORT or HOST:PORT of a live engine") from None
    from .inspect_commands import fetch_snapshot, rank_target

    where = rank_target(targets, rank or 0, token, timeout_s)
    snapshot = fetch_snapshot(where, token, timeout_s)
    return LoadedState(snapshot.state, None, f"{where.host}:{where.port}" + (f" (rank {rank})" if rank else ""))
