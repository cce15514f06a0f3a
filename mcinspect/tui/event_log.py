"""The event log: what happened during each step up to the selected one, filterable."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Log

from ..schema import Event
from .source import FrameMeta

MAX_LINES = 1000
"""Newest matching lines shown; older ones are a filter away."""


def event_line(step: int, event: Event) -> str:
    """`step     12  insert  rid=r1 node=5 slot=7 seqlen=64`."""
    kind = type(event).__name__.removesuffix("Event").lower()
    fields = " ".join(f"{name}={getattr(event, name)}" for name in event.__struct_fields__ if name != "step")
    return f"step {step:>6}  {kind:<9} {fields}"


def matching_lines(frames: Sequence[FrameMeta], up_to: int, query: str) -> list[str]:
    """The newest MAX_LINES lines of frames <= up_to whose text holds every word of `query`."""
    words = query.lower().split()
    lines: list[str] = []
    for frame in reversed(frames):
        if frame.index > up_to:
            continue
        frame_lines = [event_line(frame.step, event) for event in frame.events]
        if frame.resync:
            frame_lines.insert(0, f"step {frame.step:>6}  resync    from a snapshot: earlier steps may be missing")
        for line in reversed(frame_lines):
            lowered = line.lower()
            if all(word in lowered for word in words):
                lines.append(line)
        if len(lines) >= MAX_LINES:
            break
    lines.reverse()
    return lines[-MAX_LINES:]


class EventLog(Vertical):
    """A filter box over a log of events."""

    DEFAULT_CSS = """
    EventLog Input { height: 3; }
    EventLog Log { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._frames: Sequence[FrameMeta] = ()
        self._up_to = -1

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: words that must all appear, e.g. insert slot=7", id="event-filter")
        yield Log(id="event-lines", highlight=False)

    def show(self, frames: Sequence[FrameMeta], up_to: int) -> None:
        """Show events of frames up to index `up_to`."""
        self._frames, self._up_to = frames, up_to
        self._refill()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._refill()

    def _refill(self) -> None:
        log = self.query_one(Log)
        log.clear()
        log.write_lines(matching_lines(self._frames, self._up_to, self.query_one(Input).value))
