"""Slow state decay for the tiny random-weight models, so that a wrong cached state shows.

Random weights forget: transformers' default gates decay a GDN state by up to e^-20 per token
and Mamba2's by e^-1..e^-5, so a wrong or zeroed initial state is gone within a few tokens,
before any check or output can see it. The tiny models therefore set their gates by hand:

- the per-token decay of every recurrent state is `decay` (Mamba2 and GDN: A_log from it, with
  dt_bias 0 so that softplus(dt + dt_bias) stays near ln 2);
- GDN also forgets through its delta rule, which erases a fraction beta = sigmoid(b) of the
  state along each token's key. The projections have no bias, so the embedding carries one:
  channel BIAS_CHANNEL of every token's embedding is BIAS_SPREAD times the others' spread
  (so it barely dims them under the layers' RMS norms); the `b` rows read it with the weight
  that turns its normalised value into logit(write_strength), and every other projection of
  the mixer ignores it (as does the LM head).

Remembering is not enough: the state must also reach the logits. transformers' weight std
(0.02) leaves a gated delta net's values so small that its gated output norm divides by its
epsilon rather than by them, and the mixer adds almost nothing to the residual stream; its
weights therefore get a larger std (`strengthen`), the rest of the model keeps 0.02.

tests/bench/bench_memory_curve.py measures the result: the distance between a perturbed and the
clean state after 0, 16, 64 and 256 further tokens.
"""

from __future__ import annotations

import math

import torch

BIAS_CHANNEL = 0
BIAS_SPREAD = 5.0
"""The bias channel's value over the embeddings' standard deviation."""
TYPICAL_DT = math.log(2.0)
"""softplus(0): the step size a gate input near 0 gets with dt_bias 0."""


def add_bias_channel(embedding: torch.Tensor, lm_head: torch.Tensor) -> None:
    """Set the bias channel of every token's embedding (vocab, hidden), in place, and keep it
    out of the logits: read by the LM head it would add one constant vector to every
    position's logits, larger than what the tokens and states contribute."""
    embedding[:, BIAS_CHANNEL] = BIAS_SPREAD * float(embedding.float().std())
    lm_head[:, BIAS_CHANNEL] = 0.0


def a_log_for(decay: float, num_heads: int) -> torch.Tensor:
    """A_log per head such that exp(-exp(A_log) * TYPICAL_DT) spreads around `decay` (heads get
    0.5x .. 2x its log rate, so they do not all remember alike)."""
    rate = -math.log(decay) / TYPICAL_DT
    spread = torch.logspace(math.log10(0.5), math.log10(2.0), num_heads) if num_heads > 1 else torch.ones(1)
    return (rate * spread).log()


def normalised_bias(embedding: torch.Tensor) -> float:
    """The bias channel after an RMS norm, averaged over the vocabulary: what a projection
    reading the first layer's input sees there."""
    rms = embedding.float().pow(2).mean(-1).sqrt()
    return float((embedding[:, BIAS_CHANNEL].float() / rms).mean())


def read_bias_channel(weight: torch.Tensor, rows: slice | list[int] | None, value: float, bias: float) -> None:
    """Column BIAS_CHANNEL of a projection (out, hidden): `value` / `bias` in `rows` (so those
    outputs get about `value` from a normalised bias channel of `bias`), 0 elsewhere (None: 0
    everywhere)."""
    weight[:, BIAS_CHANNEL] = 0.0
    if rows is not None:
        weight[rows, BIAS_CHANNEL] = value / bias


def strengthen(modules: object, std: float) -> None:
    """Re-draw the weights of `modules` (linear / conv layers) from N(0, std), in place."""
    for module in modules:  # type: ignore[attr-defined]
        torch.nn.init.normal_(module.weight, std=std)


def write_logit(write_strength: float) -> float:
    """The gate logit b with sigmoid(b) == write_strength."""
    return math.log(write_strength / (1.0 - write_strength))
