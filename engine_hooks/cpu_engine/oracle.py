"""Recompute oracle for T2: the exact mamba state of a token prefix, from an independent
implementation of the tiny model (Hugging Face transformers' Qwen3-Next, on the CPU).

sglang's pool keeps, per linear-attention layer j (pool index j = rank among the linear
layers, sglang's `mamba_map`):

- `conv[0][j, slot]`: bf16 [conv_dim, kernel - 1], the last kernel - 1 inputs of the causal
  conv (zero-padded on the left for shorter prefixes), channels in the order q | k | v (all
  key heads, then all key heads, then all value heads: `torch.cat((query, key, value))` in
  `Qwen3GatedDeltaNet.forward`);
- `temporal[j, slot]`: fp32 [HV, V, K], the gated-delta-rule state S with S_t k_t giving a
  value (kernels/cpu_ops/gated_delta_rule.py).

transformers keeps the same quantities in its cache layer: `conv_states[0]` [1, conv_dim,
kernel] (the last `kernel` conv inputs: one more than sglang) and `recurrent_states[0]` [1, HV,
K, V] (`key^T @ v`: K before V). The mapping is therefore `conv[..., 1:]` and
`recurrent.transpose(-1, -2)`; both come from the same checkpoint with identical channel
orders, so nothing else is permuted. Results are exact up to the rounding differences of two
implementations (bf16 activations through the layers before a state).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

DEFAULT_CACHE_ENTRIES = 512
"""States kept by prefix; each is a few KB for the tiny model."""


class PrefixState(NamedTuple):
    """The mamba state after a prefix, in sglang's pool layout without the slot dimension."""

    conv: torch.Tensor
    """bf16 [num_linear_layers, conv_dim, kernel - 1]."""
    temporal: torch.Tensor
    """fp32 [num_linear_layers, HV, V, K]."""


def prefix_key(tokens: Sequence[int]) -> bytes:
    """Cache key of a prefix (its length is part of the hashed bytes)."""
    data = torch.tensor(list(tokens), dtype=torch.int64).numpy().tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()


class RecomputeOracle:
    """Runs the tiny model with transformers and returns prefix states in sglang's layout."""

    def __init__(self, model_path: str | Path, *, cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        from transformers import Qwen3NextForCausalLM

        model = Qwen3NextForCausalLM.from_pretrained(str(model_path), dtype=torch.bfloat16)
        self.model = model.model.eval()  # the decoder stack alone: logits are not needed
        # All layers stay, although none after the last linear one affects a state:
        # transformers' hybrid cache needs an attention layer to count positions.
        self.linear_layers = [i for i, kind in enumerate(model.config.layer_types) if kind == "linear_attention"]
        self._cache: OrderedDict[bytes, PrefixState] = OrderedDict()
        self._cache_entries = cache_entries

    @torch.no_grad()
    def state(self, tokens: Sequence[int]) -> PrefixState:
        """The state after `tokens` run alone from an empty state (cached by prefix)."""
        if not tokens:
            raise ValueError("the empty prefix has no state")
        key = prefix_key(tokens)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        ids = torch.tensor([list(tokens)], dtype=torch.int64)
        out = self.model(input_ids=ids, use_cache=True)
        layers = out.past_key_values.layers
        conv = torch.stack([layers[i].conv_states[0][0, :, 1:] for i in self.linear_layers])
        temporal = torch.stack([layers[i].recurrent_states[0][0].transpose(-1, -2) for i in self.linear_layers])
        result = PrefixState(conv.to(torch.bfloat16).contiguous(), temporal.float().contiguous())
        self._cache[key] = result
        if len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)
        return result

    def references(self, prefixes: Sequence[Sequence[int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """`state_distance_to`'s reference arguments for `prefixes`: ([conv [L, n, ...]],
        temporal [L, n, ...]), pair i being prefix i."""
        states = [self.state(p) for p in prefixes]
        conv = torch.stack([s.conv for s in states], 1)
        temporal = torch.stack([s.temporal for s in states], 1)
        return [conv], temporal


def register_transformers_oracle() -> None:
    """Offer this oracle to the inspector as "transformers" (MCINSPECT_VERIFY=transformers|both)."""
    from ..extensions import register_oracle

    register_oracle("transformers", lambda scheduler: RecomputeOracle(str(scheduler.server_args.model_path)))
