"""Exports of what the inspector shows: snapshot JSON, and the tree as SVG via mcinspect.render."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ..checks import Violation
from ..inspect_commands import write_json
from ..render import RenderError, render
from ..schema import SCHEMA_VERSION, CacheState, Seq, Snapshot
from .source import FrameMeta


class ExportFailed(Exception):
    """An export could not be written; the message is one line for the notification."""


def stamp(now: float) -> str:
    """File-name timestamp (UTC, sortable)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))


def export_snapshot(state: CacheState, frame: FrameMeta, directory: Path, now: float, rank: str = "") -> Path:
    """Write the state as a Snapshot JSON, the same format as `mcinspect snapshot`; `rank` tags
    the name (`-rank1`) when the engine has several."""
    path = directory / f"mcinspect{rank}-step{state.step}-{stamp(now)}.json"
    snapshot = Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(frame.seq), state=state, counters=frame.engine)
    try:
        write_json(snapshot, str(path))
    except OSError as exc:
        raise ExportFailed(f"cannot write {path}: {exc.strerror}") from None
    return path


def export_tree_svg(state: CacheState, violations: Sequence[Violation], directory: Path, now: float, rank: str = "") -> Path:
    """Render the tree with Graphviz (violations highlighted) into an SVG file (`rank` as above)."""
    path = directory / f"mcinspect-tree{rank}-step{state.step}-{stamp(now)}.svg"
    try:
        path.write_bytes(render(state, "svg", violations=violations))
    except RenderError as exc:
        raise ExportFailed(str(exc)) from None
    except OSError as exc:
        raise ExportFailed(f"cannot write {path}: {exc.strerror}") from None
    return path
