"""mcinspect's Textual TUI (`mcinspect attach`, `mcinspect replay`).

The CLI calls `run_attach` / `run_replay` (`mcinspect demo`: `attach_app`); tests replay recordings
(`load_recording`, `load_recordings` for every rank), the benchmark builds an `InspectorApp` over a
`StaticSource` (states built in memory). The TUI reads states through a `DataSource` per rank
(`RankSources`) and never talks ZMQ itself.
"""

from __future__ import annotations

from .app import InspectorApp
from .launch import attach_app, load_recording, load_recordings, run_attach, run_replay
from .rank_sources import RankSources
from .replay_source import ReplaySource
from .session_source import SessionSource
from .source import DataSource, NodeChanges, SourceHealth
from .static_source import StaticFrame, StaticSource
from .violations import Checker, ViolationRow, checks_checker, real_checks

__all__ = [
    "Checker",
    "DataSource",
    "InspectorApp",
    "NodeChanges",
    "RankSources",
    "ReplaySource",
    "SessionSource",
    "SourceHealth",
    "StaticFrame",
    "StaticSource",
    "ViolationRow",
    "attach_app",
    "checks_checker",
    "load_recording",
    "load_recordings",
    "real_checks",
    "run_attach",
    "run_replay",
]
