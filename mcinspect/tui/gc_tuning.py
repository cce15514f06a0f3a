"""Keep Python's cyclic GC from pausing the UI on a 100k-node cache.

Cache states hold hundreds of thousands of GC-tracked objects that can never form cycles (the
`kv_runs` list of every NodeRecord, claim lists, index tuples). A full collection walks all of
them: 100-200 ms, a visible freeze, every few frames while following an engine. So the app
freezes what is alive once the first state is loaded (those objects are then skipped by every
collection and still freed by reference counting), and index builds pause the GC while they
allocate. The app thaws them when it closes: frozen cycles are never collected, and extension
modules in the same process (`mcinspect demo` runs the engine there) report them as leaks at exit.

After the freeze, a full collection still walks every state that arrived since and Textual's
render caches (each Strip holds seven small caches): 10-20 ms, and Python runs one every ten
second-generation collections (twice in ten tab switches). States hold no cycles, so while
frozen full collections run ten times less often: only Textual's cyclic garbage waits longer.
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


FULL_COLLECTION_EVERY = 100
"""Second-generation collections between two full ones while frozen (Python's default: 10)."""
_default_thresholds: tuple[int, int, int] | None = None


def freeze_long_lived() -> None:
    """Collect once, then move every surviving object out of the GC's sight (gc.freeze), and
    make full collections rarer."""
    global _default_thresholds
    gc.collect()
    gc.freeze()
    if _default_thresholds is None:
        _default_thresholds = gc.get_threshold()
        gc.set_threshold(*_default_thresholds[:2], FULL_COLLECTION_EVERY)


def thaw() -> None:
    """Undo `freeze_long_lived`: the frozen objects are collectable again, at the usual pace."""
    global _default_thresholds
    gc.unfreeze()
    if _default_thresholds is not None:
        gc.set_threshold(*_default_thresholds)
        _default_thresholds = None
