"""Feeding new frames to the findings (checks, slot history) on a worker thread, in order.

One worker at a time: `kick` starts it when frames are waiting and none is running; it drains
every frame not yet ingested, posts `FindingsAdvanced` after each batch, and stops when caught up.
"""

from __future__ import annotations

import threading

from textual.app import App

from .findings import Findings
from .messages import FindingsAdvanced
from .source import DataSource, FrameGone


class Ingestor:
    """Runs `findings.ingest` over a source's new frames off the UI thread."""

    def __init__(self, app: App[None], source: DataSource, findings: Findings) -> None:
        self._app = app
        self._source = source
        self._ledger = findings
        self._lock = threading.Lock()
        self._running = False

    def kick(self, newest: int) -> None:
        """Make sure frames up to index `newest` get ingested (call from the UI thread)."""
        with self._lock:
            if self._running or self._ledger.next_frame > newest:
                return
            self._running = True
        # exit_on_error=False: a broken check must not take the inspector down with it; the
        # app reports failed workers (on_worker_state_changed).
        self._app.run_worker(self._run, thread=True, group="ingest", exit_on_error=False)

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    frames = [f for f in self._source.frames() if f.index >= self._ledger.next_frame]
                    if not frames:
                        self._running = False
                        return
                found = 0
                for frame in frames:
                    try:
                        state = self._source.state_at(frame.index)
                    except FrameGone:
                        continue  # left the history before its turn: the findings sees a hole
                    found += len(self._ledger.ingest(frame, state))
                self._app.post_message(FindingsAdvanced(found))
        except BaseException:
            with self._lock:
                self._running = False
            raise
