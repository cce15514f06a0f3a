"""Messages that threads post into the app (Textual's post_message is thread-safe)."""

from __future__ import annotations

from textual.message import Message


class SourceChanged(Message):
    """The data source has new frames or another connection state (from the reader thread)."""


class FindingsAdvanced(Message):
    """The ingest worker checked more frames (from the worker thread)."""

    def __init__(self, new_violations: int) -> None:
        super().__init__()
        self.new_violations = new_violations
