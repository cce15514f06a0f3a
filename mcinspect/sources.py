"""Where a command's cache states come from: a snapshot file, a recording, or a live engine."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .errors import McinspectError
from .recording import MAGIC, RecordingReader
from .schema import CacheState, EngineInfo, Step
from .snapshot_file import load_snapshot
from .target import Target, TargetError


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
    source: str, *, step: int | None = None, token: str = "", timeout_s: float = 10.0, on_warning: Callable[[str], None] | None = None
) -> LoadedState:
    """The state SOURCE designates (a recording's last step unless `step`); raises the
    loaders' own one-line errors (SnapshotFileError, RecordingError, EngineUnreachable, ...);
    `on_warning` hears of a truncated recording."""
    if os.path.exists(source):
        if is_recording(source):
            reader = RecordingReader(source, on_warning=on_warning)
            if step is None:
                last = reader.last_state()
                return LoadedState(last.state, reader.info, f"{source} at step {last.state.step}")
            return LoadedState(reader.state_at(Step(step)), reader.info, f"{source} at step {step}")
        if step is not None:
            raise SourceError(f"--step applies to recordings; {source} is a snapshot")
        return LoadedState(load_snapshot(source).state, None, source)
    try:
        target = Target.parse(source)
    except TargetError:
        raise SourceError(f"{source!r} is not a file, nor PORT or HOST:PORT of a live engine") from None
    from .inspect_commands import fetch_snapshot

    snapshot = fetch_snapshot(target, token, timeout_s)
    return LoadedState(snapshot.state, None, f"{target.host}:{target.port}")
