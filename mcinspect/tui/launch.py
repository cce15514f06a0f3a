"""Entry points for the CLI: attach to a live engine, or replay a recording."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..target import Target
from .app import InspectorApp
from .replay_source import ReplaySource
from .session_source import SessionSource
from .violations import checks_checker


def run_attach(target: Target, token: str, every_step: bool = False) -> None:
    """Run the TUI on the scheduler process at `target` until the user quits."""
    attach_app(target, token, every_step).run()


def attach_app(target: Target, token: str, every_step: bool = False) -> InspectorApp:
    """The TUI on the scheduler process at `target` (`mcinspect attach`, `mcinspect demo`);
    every_step: a frame per scheduler step, else the engine's live stream (Session)."""
    from ..session import Session

    mode = "every step" if every_step else "sampled"  # the live stream: within the engine's time budget
    source = SessionSource(
        lambda on_frame: Session(target, token=token, every_step=every_step, on_frame=on_frame),
        name=f"{target.host}:{target.port} ({mode})",
        target=target,
        token=token,
    )
    return InspectorApp(source, checker=checks_checker(source.engine))


def run_replay(source: ReplaySource) -> None:
    """Run the TUI over a recording (`load_recording`)."""
    InspectorApp(source, checker=checks_checker(source.engine)).run()


def load_recording(path: str, on_warning: Callable[[str], None] | None = None) -> ReplaySource:
    """A recording as a DataSource (the one place that knows mcinspect.recording's API); raises
    mcinspect.recording.RecordingError (one line); `on_warning` hears of a truncated file."""
    from ..recording import RecordingReader, StepNotRecorded

    reader = RecordingReader(path, on_warning=on_warning)
    frames = list(reader)
    if not frames:
        raise StepNotRecorded(f"{path} holds no whole frame: nothing to replay")
    return ReplaySource(frames, reader.info, Path(path).name)
