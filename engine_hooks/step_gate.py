"""Keeps the request and publisher threads off the GIL while the scheduler thread is inside
mcinspect's step hook.

Those threads encode and free big messages in pieces with rests (rested_encode.py), which
bounds how long they hold the GIL once they have it. But every torch op the step hook runs (a
catch-up concatenates each chunk's KV indices) releases the GIL, and a thread waiting for it
takes it then: at 100k nodes a catch-up step's three `torch.cat` calls waited 17 ms each for
it to come back (the bench's profile of its worst attach step, 63 ms). Resting until the hook
has returned costs those threads a few ms a step, and them alone.
"""

from __future__ import annotations

import threading
import time

MAX_WAIT_S = 0.05
"""A rest never waits longer than this for the hook: a step hook that never returned (it is
guarded, but) must not stop snapshots."""


class StepGate:
    """Closed while the scheduler thread runs the step hook; `rest` waits for it to open.

    A lock held by the scheduler thread, not an Event: `close` and `open` run at every step,
    and an uncontended lock is two C calls where an Event's set and clear take its condition's
    lock in Python (26 us a step of the scheduler's, profiled). The scheduler never waits for
    it: a resting thread holds it only between its own acquire and release, and a `close` that
    finds it held leaves the gate open for that step (the rest is then shorter, never longer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        self._closed = self._lock.acquire(blocking=False)

    def open(self) -> None:
        if self._closed:
            self._closed = False
            self._lock.release()

    def rest(self, seconds: float) -> None:
        """A rested piece's rest: `seconds`, then until the step hook has returned."""
        time.sleep(seconds)
        if self._lock.acquire(timeout=MAX_WAIT_S):
            self._lock.release()
