"""Feeding new frames to the findings (checks, slot history) on a worker thread, in order.

One worker at a time: `kick` starts it when frames are waiting and none is running; it drains
every frame not yet ingested, posts `FindingsAdvanced` after each batch, and stops when caught up.
Each frame's state is the last one's with the frame's delta applied, where the source has it
(`FrameStates`), and the delta goes to the findings: the checks then read what changed from it
(at 100k nodes 85.8 -> 6.9 ms a frame: tests/bench/bench_check_step.py --tui).
"""

from __future__ import annotations

import threading

from textual.app import App

from ..schema import CacheState, Delta
from .findings import Findings
from .messages import FindingsAdvanced
from .source import DataSource, FrameGone, FrameMeta, deltas_between, moved_by


class FrameStates:
    """The states of a source's frames taken in order: a frame a few after the last one taken is
    that state copied and moved by the deltas between (the source rebuilds a frame from its
    keyframe and up to 100 deltas); any other is the source's."""

    def __init__(self, source: DataSource) -> None:
        self._source = source
        self._last: tuple[int, CacheState] | None = None

    def take(self, frame: FrameMeta) -> tuple[CacheState, Delta | None]:
        """Frame `frame`'s state (read-only), and its own delta where the state was moved to it
        (a rebuilt one follows no frame the findings took: they drop the delta); raises FrameGone."""
        last = self._last
        deltas = deltas_between(self._source, last[0], frame.index) if last is not None else None
        state = moved_by(last[1], deltas) if last is not None and deltas else self._source.state_at(frame.index)
        self._last = (frame.index, state)
        return state, deltas[-1] if deltas else None


class Ingestor:
    """Runs `findings.ingest` over a source's new frames off the UI thread."""

    def __init__(self, app: App[None], source: DataSource, findings: Findings) -> None:
        self._app = app
        self._source = source
        self._ledger = findings
        self._states = FrameStates(source)
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
                        state, delta = self._states.take(frame)
                    except FrameGone:
                        continue  # left the history before its turn: the findings sees a hole
                    found += len(self._ledger.ingest(frame, state, delta))
                self._app.post_message(FindingsAdvanced(found))
        except BaseException:
            with self._lock:
                self._running = False
            raise
