"""How long a tiny model remembers a wrong state: the distance between a perturbed and the
clean mamba state as further tokens arrive, measured with transformers (the recompute oracle).

A prefix is run once; its mamba states (every mamba layer, conv and temporal) are replaced by
a perturbation (zeros, as when a hit's suffix ran from a blank state, #29368; or another
prefix's state, as when the wrong chunk state was cached, #37836) while the attention KV stays
right; then the same continuation is fed to both, and the relative L2 distance of the
temporal states (all mamba layers together, as T2 measures it) is read at each checkpoint.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence

import torch

from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle

CHECKPOINTS = (0, 16, 64, 256)
PERTURBATIONS = ("zero", "other-prefix")


def random_tokens(n: int, rng: random.Random, vocab: int = 512) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(n)]


@torch.no_grad()
def memory_curve(
    oracle: RecomputeOracle, perturbation: str, *, prefix_len: int = 128, checkpoints: Sequence[int] = CHECKPOINTS, seed: int = 0
) -> list[float]:
    """Relative L2 (temporal, all mamba layers) between perturbed and clean after each checkpoint."""
    rng = random.Random(seed)
    prefix, other, continuation = (random_tokens(n, rng) for n in (prefix_len, prefix_len, max(checkpoints)))
    clean = _run(oracle, prefix, None)
    perturbed = copy.deepcopy(clean)
    source = _run(oracle, other, None) if perturbation == "other-prefix" else None
    for i in oracle.linear_layers:
        layer = perturbed.layers[i]
        for name in ("conv_states", "recurrent_states"):
            state = getattr(layer, name)[0]
            state.copy_(getattr(source.layers[i], name)[0]) if source is not None else state.zero_()
    distances, done = [], 0
    for upto in checkpoints:
        if upto > done:
            clean = _run(oracle, continuation[done:upto], clean)
            perturbed = _run(oracle, continuation[done:upto], perturbed)
            done = upto
        want, got = oracle.read_cache(clean).temporal, oracle.read_cache(perturbed).temporal
        distances.append(((got - want).norm() / want.norm()).item())
    return distances


def _run(oracle: RecomputeOracle, tokens: list[int], cache: object) -> object:
    out = oracle.model(input_ids=torch.tensor([tokens]), past_key_values=cache, use_cache=True)
    return out.past_key_values
