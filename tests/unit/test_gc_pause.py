"""gc_pause: the step hook's short-lived objects never reach an older GC generation, the young
collection due meanwhile runs at the hook's end, and an engine that runs without the GC keeps it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mcinspect_engine_hooks import gc_pause


@pytest.fixture
def small_generations() -> Iterator[None]:
    """A young generation of 50 objects and older ones collected at every chance: any collection
    that falls inside a burst of allocations shows in the counts."""
    was, thresholds = gc.isenabled(), gc.get_threshold()
    gc.collect()
    gc.set_threshold(50, 1, 1)
    gc.enable()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not was:
            gc.disable()


def older_collections() -> int:
    stats = gc.get_stats()
    return stats[1]["collections"] + stats[2]["collections"]


def a_step_of_garbage() -> None:
    """What a captured step leaves: thousands of containers alive until it ends."""
    held = [[i] for i in range(5000)]
    del held


def test_objects_dead_by_the_hooks_end_start_no_older_collection(small_generations: None) -> None:
    before = older_collections()
    a_step_of_garbage()  # unpaused: young collections inside the burst promote what is still alive
    assert older_collections() > before
    before = older_collections()
    assert gc_pause.pause()
    a_step_of_garbage()
    gc_pause.resume()
    assert older_collections() == before and gc.isenabled()


def test_the_young_collection_due_runs_at_the_hooks_end(small_generations: None) -> None:
    assert gc_pause.pause()
    kept = [[i] for i in range(500)]  # survivors: the young generation is past its threshold
    assert gc.get_count()[0] > 50
    gc_pause.resume()
    assert gc.get_count()[0] < 50 and len(kept) == 500


def test_an_engine_running_without_the_gc_keeps_it_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        assert not gc_pause.pause()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
