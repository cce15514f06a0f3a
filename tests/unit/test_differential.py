"""Comparing a cached run with the uncached replay of its prompts (mcinspect/differential.py)."""

from __future__ import annotations

import math

import pytest

from mcinspect.differential import Answer, compare
from mcinspect_engine_hooks.cpu_engine.workload import RequestSpec


def answer(prompt: list[int], cached: int, ids: tuple[int, ...], logprobs: tuple[float, ...]) -> Answer:
    return Answer(RequestSpec(prompt, len(ids), "multi-turn"), cached, ids, logprobs)


def test_only_hits_are_compared_and_the_first_difference_is_named() -> None:
    truth = [
        answer([1, 2], 0, (5, 6, 7), (-1.0, -2.0, -3.0)),
        answer([1, 2, 3], 0, (5, 6, 7), (-1.0, -2.0, -3.0)),
        answer([4], 0, (8, 9), (-0.5, -0.25)),
        answer([1, 2, 9], 0, (5, 6), (-1.0, -2.0)),
    ]
    cached = [
        answer([1, 2], 0, (5, 6, 8), (-1.0, -2.0, -9.0)),  # no hit: not compared, however different
        answer([1, 2, 3], 2, (5, 6, 7), (-1.0, -2.0, -3.0)),  # a hit, bit-exact
        answer([4], 1, (8, 9), (-0.5, -0.2)),  # a hit, a logprob off at position 1
        answer([1, 2, 9], 2, (7, 6), (-1.0, -2.0)),  # a hit, another token at once
    ]
    report = compare(cached, truth)
    assert (report.requests, report.requests_with_hits) == (4, 3)
    (logprob_off, token_off) = report.divergences
    assert (logprob_off.index, logprob_off.first_position) == (2, 1)
    assert logprob_off.max_abs_logprob_diff == pytest.approx(0.05)
    assert (token_off.index, token_off.first_position, token_off.max_abs_logprob_diff) == (3, 0, math.inf)
    assert report.max_abs_logprob_diff_on_hits == math.inf and not report.bit_exact
    exact = compare(cached[1:2], truth[1:2])
    assert exact.bit_exact and exact.max_abs_logprob_diff_on_hits == 0.0


def test_runs_of_other_prompts_are_refused() -> None:
    with pytest.raises(ValueError, match="same prompts"):
        compare([answer([1], 1, (2,), (-1.0,))], [answer([3], 0, (2,), (-1.0,))])
