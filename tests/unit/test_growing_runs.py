"""GrowingRuns: the values a request's KV runs take step after step share one list, and each
stays what it was when made (records published earlier are encoded later, on other threads)."""

from __future__ import annotations

import random

import msgspec
import pytest

from mcinspect.schema import join_runs
from mcinspect_engine_hooks.growing_runs import GrowingRuns, encoder


def test_each_value_keeps_its_runs_while_later_ones_grow() -> None:
    a = GrowingRuns.empty().extended([(10, 4)])
    b = a.extended([(14, 1)])  # continues the last run
    c = b.extended([(20, 1), (30, 2)])
    d = c.extended([(32, 1), (40, 1)])
    assert a.to_list() == [(10, 4)]
    assert b.to_list() == [(10, 5)]
    assert c.to_list() == [(10, 5), (20, 1), (30, 2)]
    assert d.to_list() == [(10, 5), (20, 1), (30, 3), (40, 1)]
    assert (len(a), len(c), len(d), len(GrowingRuns.empty())) == (1, 3, 4, 0)
    assert b.extended([]) is b


def test_an_older_value_extended_again_does_not_change_the_newer() -> None:
    base = GrowingRuns.empty().extended([(0, 2), (5, 1)])
    newer = base.extended([(9, 1)])
    other = base.extended([(7, 1)])  # another future from the same value: its own list
    assert newer.to_list() == [(0, 2), (5, 1), (9, 1)]
    assert other.to_list() == [(0, 2), (5, 1), (7, 1)]
    assert base.to_list() == [(0, 2), (5, 1)]


def test_extending_is_what_a_client_joining_growths_gets() -> None:
    rng = random.Random(7)
    for _ in range(200):
        runs, joined = GrowingRuns.empty(), []
        at = 0
        for _ in range(rng.randrange(1, 30)):
            added = []
            for _ in range(rng.randrange(0, 4)):
                at += rng.choice([0, 0, 1, 5])  # contiguous with the run before, or not
                length = rng.randrange(1, 4)
                if added and added[-1][0] + added[-1][1] == at:
                    at += 1  # runs_of_ints gives maximal runs: never two contiguous ones
                added.append((at, length))
                at += length
            runs, joined = runs.extended(added), join_runs(joined, added)
            assert runs.to_list() == joined


def test_equal_to_lists_and_tuples_and_encoded_as_a_list() -> None:
    runs = GrowingRuns.empty().extended([(1, 3), (8, 1)])
    assert runs == [(1, 3), (8, 1)] and runs == ((1, 3), (8, 1)) and runs == [[1, 3], [8, 1]]
    assert runs != [(1, 3)] and runs == GrowingRuns.empty().extended([(1, 2)]).extended([(3, 1), (8, 1)])
    assert encoder().encode({"kv_runs": runs}) == msgspec.msgpack.encode({"kv_runs": [(1, 3), (8, 1)]})
    with pytest.raises(TypeError):
        hash(runs)
    with pytest.raises(NotImplementedError):
        encoder().encode(object())
