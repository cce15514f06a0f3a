"""Entry points for the CLI: attach to a live engine, or replay a recording (every rank of either)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..target import Target
from .app import InspectorApp
from .rank_sources import RankSources
from .replay_source import ReplaySource
from .violations import real_checks


def run_attach(targets: Sequence[Target], token: str, every_step: bool = False) -> None:
    """Run the TUI on the engine whose rank 0 listens at `targets[0]` until the user quits."""
    attach_app(targets, token, every_step).run()


def attach_app(targets: Sequence[Target], token: str, every_step: bool = False) -> InspectorApp:
    """The TUI on every rank of a live engine (`mcinspect attach`, `mcinspect demo`), discovered
    from `targets` (rank 0's address, then further hosts); every_step: a frame per scheduler
    step, else the engine's live stream (Session)."""
    return InspectorApp(RankSources.of_engine(targets, token, every_step), checks=real_checks)


def run_replay(sources: Sequence[ReplaySource]) -> None:
    """Run the TUI over a recording's ranks (`load_recordings`)."""
    InspectorApp(RankSources(sources), checks=real_checks).run()


def load_recordings(path: str, on_warning: Callable[[str], None] | None = None) -> list[ReplaySource]:
    """A recording and the other ranks' beside it (rank_files.py), one DataSource each."""
    from ..rank_files import rank_paths

    return [load_recording(rank_path, on_warning) for rank_path in rank_paths(path)]


def load_recording(path: str, on_warning: Callable[[str], None] | None = None) -> ReplaySource:
    """A recording as a DataSource (the one place that knows mcinspect.recording's API); raises
    mcinspect.recording.RecordingError (one line); `on_warning` hears of a truncated file."""
    from ..recording import RecordingReader, StepNotRecorded

    reader = RecordingReader(path, on_warning=on_warning)
    frames = list(reader)
    if not frames:
        raise StepNotRecorded(f"{path} holds no whole frame: nothing to replay")
    return ReplaySource(frames, reader.info, Path(path).name)
