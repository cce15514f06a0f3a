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
    """Closed while the scheduler thread runs the step hook; `rest` waits for it to open."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def rest(self, seconds: float) -> None:
        """A rested piece's rest: `seconds`, then until the step hook has returned."""
        time.sleep(seconds)
        self._open.wait(MAX_WAIT_S)
