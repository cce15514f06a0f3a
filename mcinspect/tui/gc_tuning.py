"""Keep Python's cyclic GC from pausing the UI on a 100k-node cache.

Cache states hold hundreds of thousands of GC-tracked objects that can never form cycles (the
`kv_runs` list of every NodeRecord, claim lists, index tuples). A full collection walks all of
them: 100-200 ms, a visible freeze, every few frames while following an engine. So the app
freezes what is alive once the first state is loaded (those objects are then skipped by every
collection and still freed by reference counting), and index builds pause the GC while they
allocate. The app thaws them when it closes: frozen cycles are never collected, and extension
modules in the same process (`mcinspect demo` runs the engine there) report them as leaks at exit.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while allocating many small acyclic objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freeze_long_lived() -> None:
    """Collect once, then move every surviving object out of the GC's sight (gc.freeze)."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Undo `freeze_long_lived`: the frozen objects are collectable again."""
    gc.unfreeze()
