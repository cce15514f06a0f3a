"""The inspector over tests/tui/data.py, with the clock pinned (run this file to look at it)."""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: make `data` importable as the tests do
    sys.path.insert(0, str(Path(__file__).parent.parent))

from data import demo_checker, demo_events, demo_info, demo_states

from mcinspect.tui import InspectorApp, SourceHealth, StaticSource

PINNED_NOW = 1_767_225_600.0
"""2026-01-01T00:00:00Z: every time the screens show derives from it."""


class DisconnectedSource(StaticSource):
    """A live source whose engine went away after these frames (history kept)."""

    def health(self) -> SourceHealth:
        return SourceHealth(
            status="disconnected", dropped=3, gaps=1, resyncs=1,
            last_error="no answer from 127.0.0.1:7777 within 5 s; is the engine running with MCINSPECT_PORT?",
        )  # fmt: skip


def _source(cls: type[StaticSource], name: str, live: bool) -> StaticSource:
    return cls(states=demo_states(), events=demo_events(), info=demo_info(), name=name, started_at=PINNED_NOW, live=live)


def make_demo_app(export_dir: Path | None = None) -> InspectorApp:
    """The demo data as a replay, checked by the tests' stand-in checker."""
    return InspectorApp(_source(StaticSource, "demo replay", live=False), checker=demo_checker, clock=lambda: PINNED_NOW, export_dir=export_dir)


def make_disconnected_app() -> InspectorApp:
    """The demo data as a live engine that has just gone away."""
    return InspectorApp(_source(DisconnectedSource, "127.0.0.1:7777", live=True), checker=demo_checker, clock=lambda: PINNED_NOW)


if __name__ == "__main__":
    make_demo_app().run()
