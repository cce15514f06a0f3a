"""Differential runs: the demo workload with the radix cache, then the same prompts without it.

Without a prefix cache every request computes its whole prompt from an empty state: that is
the truth a cache hit must reproduce. On the embedded CPU engine a correct cache gives
bit-identical output logprobs on hits (its kernels compute a state the same way however the
tokens were split, see kernels/cpu_ops/selective_scan.py), so any difference on a request
that hit the cache points at a wrong cached state; `--fault wrong-chunk-state` on nemotron-h
(#37836) shows one. The second run replays the first run's exact prompts (multi-turn and
branch prompts embed earlier outputs, which a fault changes) with the radix cache disabled
and no fault, on a fresh engine, one engine at a time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig, start_engine
from mcinspect_engine_hooks.cpu_engine.workload import RequestSpec, Workload


@dataclass(frozen=True)
class Answer:
    """One request's prompt and what the engine returned for it."""

    spec: RequestSpec
    cached_tokens: int
    output_ids: tuple[int, ...]
    output_logprobs: tuple[float, ...]
    """The logprob of each generated token."""


@dataclass(frozen=True)
class Divergence:
    """A request that hit the cache and whose answer differs from the uncached one."""

    index: int
    """The request's position in the workload."""
    kind: str
    cached_tokens: int
    first_position: int
    """The first output position whose logprob or token differs."""
    max_abs_logprob_diff: float
    """Over the positions up to and including the first differing token (inf: none compared)."""


@dataclass(frozen=True)
class DifferentialReport:
    """The cached run against the uncached replay of the same prompts."""

    requests: int
    requests_with_hits: int
    max_abs_logprob_diff_on_hits: float
    """0.0 when every hit reproduced the uncached logprobs bit for bit."""
    divergences: tuple[Divergence, ...]

    @property
    def bit_exact(self) -> bool:
        return not self.divergences


def differential_run(config: EmbeddedEngineConfig, requests: int) -> DifferentialReport:
    """Run the workload on `config` (its fault included), replay its prompts without the radix
    cache and without the fault, and compare the answers of the requests that hit the cache."""
    cached = run_workload(config, Workload(seed=config.seed, total_requests=requests))
    truth_config = dataclasses.replace(config, fault=None, radix_cache=False, inspector_port=None)
    truth = run_workload(truth_config, [[answer.spec for answer in wave] for wave in cached])
    return compare([a for wave in cached for a in wave], [a for wave in truth for a in wave])


def run_workload(config: EmbeddedEngineConfig, source: Workload | Sequence[list[RequestSpec]]) -> list[list[Answer]]:
    """Start an engine for `config`, send the waves of `source` greedily with logprobs (a
    Workload is told each wave's outputs, for its later turns), shut the engine down."""
    engine = start_engine(config)
    try:
        answered: list[list[Answer]] = []
        for wave in source.waves() if isinstance(source, Workload) else source:
            answers = _send(engine, wave)
            if isinstance(source, Workload):
                source.record(wave, [list(a.output_ids) for a in answers])
            answered.append(answers)
        return answered
    finally:
        engine.shutdown()


def compare(cached: Sequence[Answer], truth: Sequence[Answer]) -> DifferentialReport:
    """Answers of the same prompts, in the same order, with and without the cache."""
    if [a.spec.input_ids for a in cached] != [a.spec.input_ids for a in truth]:
        raise ValueError("the two runs did not send the same prompts")
    divergences, worst, hits = [], 0.0, 0
    for index, (got, want) in enumerate(zip(cached, truth)):
        if got.cached_tokens == 0:
            continue
        hits += 1
        diff, first = _first_difference(got, want)
        worst = max(worst, diff)
        if first is not None:
            divergences.append(Divergence(index, got.spec.kind, got.cached_tokens, first, diff))
    return DifferentialReport(len(cached), hits, worst, tuple(divergences))


def _first_difference(got: Answer, want: Answer) -> tuple[float, int | None]:
    """(max |logprob diff| up to the first differing token, the first differing position)."""
    worst, first = 0.0, None
    for position, (g_id, w_id, g_lp, w_lp) in enumerate(zip(got.output_ids, want.output_ids, got.output_logprobs, want.output_logprobs)):
        diff = abs(g_lp - w_lp) if g_id == w_id else math.inf
        worst = max(worst, diff)
        if diff != 0.0 and first is None:
            first = position
        if g_id != w_id:
            break
    return worst, first


def _send(engine: Any, wave: list[RequestSpec]) -> list[Answer]:
    outputs = engine.generate(
        input_ids=[spec.input_ids for spec in wave],
        sampling_params=[{"max_new_tokens": spec.max_new_tokens, "temperature": 0.0, "ignore_eos": True} for spec in wave],
        return_logprob=True,
    )
    return [
        Answer(
            spec=spec,
            cached_tokens=int(out["meta_info"].get("cached_tokens", 0)),
            output_ids=tuple(out["output_ids"]),
            output_logprobs=tuple(float(entry[0]) for entry in out["meta_info"]["output_token_logprobs"]),
        )
        for spec, out in zip(wave, outputs, strict=True)
    ]
