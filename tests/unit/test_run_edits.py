"""Free runs edited by a change (mcinspect.run_edits) against the same change made to sets of
tokens, and a Delta's KvEdit applied by `apply_delta`, within and past a seq gap."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from mcinspect.run_edits import edit_runs, edited_leniently, intervals, outside  # noqa: E402
from mcinspect.schema import SCHEMA_VERSION, CacheState, Counters, Delta, KvEdit, KvState, Seq, Step, apply_delta, from_runs  # noqa: E402

from factory import runs_of  # noqa: E402

SIZE = 200


def random_set(rng: random.Random, density: float) -> set[int]:
    return {token for token in range(SIZE) if rng.random() < density}


def test_an_edit_equals_the_set_change_and_refuses_what_sglang_never_does() -> None:
    rng = random.Random(0)
    applied = refused = 0
    for _ in range(2000):
        free = random_set(rng, rng.random())
        removed = {t for t in free if rng.random() < 0.2} | ({rng.randrange(SIZE)} if rng.random() < 0.2 else set())
        added = {t for t in range(SIZE) if t not in free and rng.random() < 0.1} | ({rng.randrange(SIZE)} if rng.random() < 0.2 else set())
        fits = removed <= free and not (added & (free - removed))
        result = edit_runs(runs_of(free), runs_of(removed), runs_of(added))
        if fits:
            assert result == runs_of((free - removed) | added)
            applied += 1
        else:  # a token taken that was not free, or given back while free: an allocator bug
            assert result is None
            refused += 1
        assert edited_leniently(runs_of(free), runs_of(removed), runs_of(added)) == runs_of((free - removed) | added)
    assert applied > 500 and refused > 200


def test_outside_is_the_set_difference() -> None:
    """Tokens of some intervals that are not in a free list (a step's freed tokens that were
    not free before), found by bisection, against sets."""
    rng = random.Random(1)
    for _ in range(2000):
        free = random_set(rng, rng.random())
        tokens = random_set(rng, rng.random() * 0.3)
        starts, ends = outside(intervals(runs_of(tokens)), runs_of(free))
        assert {t for start, end in zip(starts, ends) for t in range(start, end)} == tokens - free
        assert all(a < b for a, b in zip(ends, starts[1:]))  # sorted, and apart


def test_edit_runs_leaves_its_input_alone() -> None:
    runs = [(0, 10), (20, 5)]
    assert edit_runs(runs, [(2, 3)], [(10, 2)]) == [(0, 2), (5, 7), (20, 5)]
    assert runs == [(0, 10), (20, 5)]


def _state(free: set[int]) -> CacheState:
    return CacheState(step=Step(0), nodes={}, slots={}, requests={}, kv=KvState(page_size=1, size=SIZE, free_runs=runs_of(free)))


def _delta(seq: int, edit: KvEdit) -> Delta:
    return Delta(
        schema_version=SCHEMA_VERSION, seq=Seq(seq), step=Step(seq), upsert_nodes=[], removed_nodes=[], slots={}, upsert_requests=[],
        removed_requests=[], kv=None, events=[], counters=Counters(), kv_edit=edit,
    )  # fmt: skip


def test_a_delta_kv_edit_moves_the_free_runs_in_and_past_a_gap() -> None:
    state = _state(set(range(0, 50)) | set(range(100, 120)))
    apply_delta(state, _delta(1, KvEdit(removed=[(0, 8)], added=[(50, 10), (90, 10)])))
    assert set(from_runs(state.kv.free_runs)) == set(range(8, 60)) | set(range(90, 120))
    assert state.kv.free_runs == [(8, 52), (90, 30)]
    # Past a missed delta the edit may not fit (a token taken that this state holds as used):
    # it is applied as sets, and the runs stay maximal.
    apply_delta(state, _delta(3, KvEdit(removed=[(60, 5), (8, 2)], added=[(60, 2), (120, 3)])))
    assert state.kv.free_runs == [(10, 52), (90, 33)]
