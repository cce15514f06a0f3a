"""The cyclic GC paused while a step hook runs, so that the hook's own short-lived objects never
reach an older generation.

A captured step builds a few objects for each held request (its plan, its key) that are garbage
by the hook's end. A young collection falling inside the hook found them alive and moved them
up a generation, and enough of those start a collection of the whole heap: sglang's, torch's
and the tree's objects, 325-386 ms of the scheduler thread with 1,000-4,000 waiting requests
(tests/bench/bench_waiting_requests.py). Paused, no collection runs until the hook ends; the
young collection due by then runs at its end, still in the hook's time, over what survived.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def pause() -> bool:
    """Pause the GC; True when it was running (then `resume` it), False when the engine runs
    without it (left as it is)."""
    if not gc.isenabled():
        return False
    gc.disable()
    return True


def resume() -> None:
    """Run the GC again, and its young collection now if one fell due while it was paused."""
    gc.enable()
    threshold = gc.get_threshold()[0]
    if threshold and gc.get_count()[0] > threshold:
        gc.collect(0)


@contextmanager
def paused() -> Iterator[None]:
    """`pause` and `resume` around a block (a full read: a few objects per node)."""
    running = pause()
    try:
        yield
    finally:
        if running:
            resume()
