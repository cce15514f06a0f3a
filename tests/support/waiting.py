"""Polling for a condition in tests that watch other threads or processes."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], timeout_s: float, poll: Callable[[], object] = lambda: time.sleep(0.02)) -> bool:
    """Whether `condition` became true within `timeout_s`, calling `poll` between tries."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        poll()
    return True
