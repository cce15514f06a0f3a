"""T2 oracles: each tells how far a slot's state is from the state of a token prefix run alone.

Distances are relative L2 per component, computed on the pool's device with the state distance
kernels (mcinspect_kernels.state_distance): one for each conv tensor the model keeps (GDN: one
q|k|v window; Mamba2: one x|B|C window; KDA: three), reported as the largest, and one for the
temporal (SSM) state. Kept apart: a conv window's norm is ~100x an SSM state's, so a combined
distance would hide a wrong SSM state. Per TP rank each pool holds the rank's shard, and so does
the engine's recompute: every rank compares its own heads, with no gather.

- `EngineOracle`: the engine's own forward pass (reference.py): any model, any device.
- `TensorOracle`: an oracle that returns the states as tensors (the embedded CPU engine's
  transformers implementation, registered through extensions.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mcinspect_kernels.state_distance import state_distance, state_distance_to

from .extensions import StateOracle
from .reference import ReferencePrefill


@dataclass(frozen=True)
class Distances:
    conv_rel_l2: float
    """The largest over the model's conv tensors."""
    temporal_rel_l2: float
    seconds: float
    """What computing the reference cost the scheduler thread."""
    tokens: int


class EngineOracle:
    """References prefilled by the engine itself, compared slot to slot in the pool."""

    name = "engine"

    def __init__(self, scheduler: Any) -> None:
        self.prefill = ReferencePrefill(scheduler)
        cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
        self._conv: list[torch.Tensor] = list(cache.conv)
        self._temporal: torch.Tensor = cache.temporal

    def room(self, tokens: int) -> bool:
        return self.prefill.room(tokens)

    def distances(self, slot: int, tokens: Sequence[int]) -> Distances:
        if not tokens:  # nothing prefilled: the state is the pool's zero state
            return zero_distances(self._conv, self._temporal, slot)
        cached = torch.tensor([slot], dtype=torch.int64, device=self._temporal.device)

        def compare(working: torch.Tensor) -> tuple[float, float]:
            working = working.to(self._temporal.device)
            conv = [float(state_distance([], c, cached, working).rel_l2[0]) for c in self._conv]
            temporal = float(state_distance([], self._temporal, cached, working).rel_l2[0])
            return _largest(conv), temporal

        (conv, temporal), run = self.prefill.run(tokens, compare)
        return Distances(conv, temporal, run.seconds, run.tokens)


class TensorOracle:
    """A `StateOracle` whose states are compared with the slot by `state_distance_to`."""

    def __init__(self, name: str, oracle: StateOracle, scheduler: Any) -> None:
        self.name = name
        self.oracle = oracle
        cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
        self._conv: list[torch.Tensor] = list(cache.conv)
        self._temporal: torch.Tensor = cache.temporal

    def room(self, tokens: int) -> bool:
        return True  # it needs none of the engine's pools

    def distances(self, slot: int, tokens: Sequence[int]) -> Distances:
        if not tokens:
            return zero_distances(self._conv, self._temporal, slot)
        began = time.perf_counter()
        ref_conv, ref_temporal = self.oracle.references([tokens])
        ids = torch.tensor([slot], dtype=torch.int64, device=self._temporal.device)
        # state_distance_to takes any pool-shaped tensor as its `temporal` argument: one call
        # per component keeps their distances apart.
        conv = [float(state_distance_to([], c, ids, [], r).rel_l2[0]) for c, r in zip(self._conv, ref_conv)]
        temporal = float(state_distance_to([], self._temporal, ids, [], ref_temporal).rel_l2[0])
        return Distances(_largest(conv), temporal, time.perf_counter() - began, len(tokens))


def zero_distances(conv: list[torch.Tensor], temporal: torch.Tensor, slot: int) -> Distances:
    """A slot against the empty prefix's state, all zeros (a node with an empty key, #35821)."""
    began = time.perf_counter()
    ids = torch.tensor([slot], dtype=torch.int64, device=temporal.device)

    def zeros(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros((t.shape[0], 1, *t.shape[2:]), dtype=t.dtype, device=t.device)

    conv_rel = [float(state_distance_to([], c, ids, [], zeros(c)).rel_l2[0]) for c in conv]
    temporal_rel = float(state_distance_to([], temporal, ids, [], zeros(temporal)).rel_l2[0])
    return Distances(_largest(conv_rel), temporal_rel, time.perf_counter() - began, 0)


def _largest(values: list[float]) -> float:
    """The largest distance, NaN first (a NaN anywhere is the worst news)."""
    if any(v != v for v in values):
        return float("nan")
    return max(values, default=-1.0)
