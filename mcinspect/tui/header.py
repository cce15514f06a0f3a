"""The status header: engine, rank, step, connection, drops and gaps, live or paused, violations."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import Static

from ..schema import EngineInfo, VerifyStats
from .source import SourceHealth


@dataclass(frozen=True)
class HeaderState:
    """Everything the header shows, so it redraws from one value."""

    source: str
    engine: EngineInfo | None
    health: SourceHealth
    step: int | None
    frame: int | None
    """Position of the shown frame in the held frames (0-based)."""
    frames: int
    live: bool
    """The source can deliver new frames (attach), unlike a replay."""
    following: bool
    violations: int
    violations_here: int
    received_at: float | None
    verifier: VerifyStats | None = None
    """The engine's T2 verifier counts (attached views only)."""
    rank: int = 0
    """The rank on view, of `ranks` (an engine of several ranks: R switches)."""
    ranks: int = 1
    differing: tuple[int, ...] = ()
    """Ranks that tp-agree found different from their reference rank at this step."""


_STATUS_STYLES = {
    "connected": ("● connected", "bold green"),
    "replay": ("■ replay", "bold cyan"),
    "connecting": ("◌ connecting", "bold yellow"),
    "disconnected": ("✖ DISCONNECTED", "bold white on red"),
}


def engine_line(source: str, engine: EngineInfo | None, rank: int = 0, ranks: int = 1) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(" mcinspect ", style="bold black on dodger_blue2")
    if ranks > 1:
        text.append(f" rank {rank} of {ranks} ", style="bold black on orchid")
    text.append(f" {source} ", style="bold")
    if engine is None:
        text.append(" engine: not known yet", style="grey62")
        return text
    model = engine.model_path.rstrip("/").rsplit("/", 1)[-1]
    parts = [
        model,
        engine.strategy,
        f"page {engine.page_size}",
        f"overlap {'on' if engine.overlap else 'off'}",
        f"tree core {engine.tree_core}" + ("" if engine.full_tree_detail else " (partial)"),
        f"rank tp{engine.tp_rank}/dp{engine.dp_rank}",
        f"sglang {engine.sglang_version}",
    ]
    text.append(" · ".join(parts), style="grey85")
    return text


def status_line(state: HeaderState) -> Text:
    """Most important first: a narrow terminal cuts the end of the line."""
    text = Text(no_wrap=True, overflow="ellipsis")
    health = state.health
    label, style = _STATUS_STYLES.get(health.status, (health.status, "bold"))
    text.append(f" {label} ", style=style)
    if health.status == "disconnected":
        text.append(" reconnecting, history kept ", style="yellow")
    if state.step is None:
        text.append("  waiting for the first snapshot", style="grey62")
    else:
        if state.live and not state.following:
            text.append("  ❚❚ PAUSED ", style="bold black on yellow")
        elif state.live and health.connected:
            text.append("  ▶ LIVE ", style="bold black on green3")
        # else a replay, or an engine gone: the frame counter says where the view is
        assert state.frame is not None
        text.append(f"  step {state.step}", style="bold")
        text.append(f"  frame {state.frame + 1}/{state.frames}")
        if not state.following and state.frame + 1 < state.frames:
            text.append(f" (+{state.frames - state.frame - 1} newer)", style="grey62")
    text.append("  ")
    if state.violations:
        plural = "s" if state.violations != 1 else ""
        text.append(f" ⚠ {state.violations} violation{plural} ({state.violations_here} here) ", style="bold bright_white on red")
    else:
        text.append(" ✓ no violations ", style="green")
    if state.differing:
        ranks = ", ".join(map(str, state.differing))
        text.append(
            f"  ✗ rank{'s' if len(state.differing) > 1 else ''} {ranks} differ{'' if len(state.differing) > 1 else 's'} here (6: ranks) ",
            style="bold bright_white on dark_orange3",
        )
    if health.hook_errors:
        text.append(f"  hook errors {health.hook_errors}", style="bold red")
    text.append(f"  drops {health.dropped} gaps {health.gaps} resyncs {health.resyncs}", style="grey70")
    verifier = verifier_text(state.engine, state.verifier)
    if verifier:
        text.append(f"  {verifier}", style="bold red" if state.verifier is not None and state.verifier.mismatches else "grey70")
    if state.step is not None and state.received_at:  # 0: unknown (recordings keep no frame times)
        text.append("  " + time.strftime("%H:%M:%SZ", time.gmtime(state.received_at)), style="grey62")
    return text


def verifier_text(engine: EngineInfo | None, stats: VerifyStats | None) -> str:
    """`T2 engine ≤5%: 24 verified, 2 queued, 0 mismatches`: the verifier's budget and queue."""
    if engine is None or (engine.verify == "off" and (stats is None or not stats.verified)):
        return ""
    head = f"T2 {engine.verify} ≤{engine.verify_share:.0%}" if engine.verify != "off" else "T2 on request"
    if stats is None:
        return head
    return f"{head}: {stats.verified} verified, {stats.queued} queued, {stats.mismatches} mismatches"


class StatusHeader(Static):
    """Two lines at the top; redraws from a HeaderState."""

    _shown: Text | None = None

    DEFAULT_CSS = """
    StatusHeader { height: 3; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, state: HeaderState) -> None:
        lines = [engine_line(state.source, state.engine, state.rank, state.ranks), status_line(state)]
        if state.health.last_error and state.health.status != "connected":
            lines.append(Text(" " + state.health.last_error, style="yellow", no_wrap=True, overflow="ellipsis"))
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(lines)
        if text != self._shown:
            self._shown = text
            self.update(text, layout=False)  # a fixed three lines: no layout pass per frame
