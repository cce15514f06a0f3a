"""Every-step captures with dirty marks through real churn, for the caches whose hooks keep
their nodes by id (MambaRadixCache's mrc_marks, 0.5.16's marks_0516): the tests drive the real
cache, this checks what each capture published and how many nodes it read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcinspect.schema import CacheState, Counters, Seq, Step, apply_delta
from mcinspect_engine_hooks.catch_up import IMMEDIATE_NODES

RESET_STEP = 30
"""The churn step whose change ends in the cache's `reset()`: its new tree is re-read whole."""

STEPS = 45
MOST_READ = 60
"""Nodes a capture may read in a step of churn (the tree has 2 * IMMEDIATE_NODES and more)."""


def check_marked_churn(
    capture: Any, grow: Callable[[], None], churn: Callable[[int], None], full_walk: Callable[[int], CacheState], nodes: Callable[[], int]
) -> int:
    """The tree grown unwatched (`grow()`, 2 * IMMEDIATE_NODES times) is caught up over steps;
    then at each step the published state equals `full_walk(step)`, `churn(n)` changes the tree
    (n = 1 .. STEPS - 1; a reset at RESET_STEP) and the next capture reads at most MOST_READ
    nodes (`nodes()`: the tree's size now). Returns the tombstone records published."""
    read: list[int] = []
    records = capture._view.records
    capture._view.records = lambda items, *a, **k: read.append(len(items)) or records(items, *a, **k)
    published = capture.full_state(Step(0))
    for _ in range(2 * IMMEDIATE_NODES):
        grow()
    step, parts, tombstones = 0, None, 0
    while parts is None:  # the unwatched growth: a catch-up spread over steps
        step += 1
        parts = capture.step(Step(step))
    for n in range(1, STEPS):
        apply_delta(published, parts.to_delta(seq=Seq(step), step=Step(step), events=[], counters=Counters()))
        assert published == full_walk(step), f"step {step}"
        tombstones += sum(record.tombstone for record in published.nodes.values())
        size = nodes()
        churn(n)
        read.clear()
        step += 1
        parts = capture.step(Step(step))
        if n == RESET_STEP:  # its (new) tree re-read whole, as after a mark overflow (catch_up.py)
            while parts is None:
                step += 1
                parts = capture.step(Step(step))
            continue
        assert parts is not None and not capture.catching_up, n
        assert sum(read) <= MOST_READ and (n > RESET_STEP or size >= 2 * IMMEDIATE_NODES), (n, sum(read), size)
    return tombstones
