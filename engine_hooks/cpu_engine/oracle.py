"""Recompute oracle for T2: the exact mamba state of a token prefix, from an independent
implementation of the tiny model (Hugging Face transformers' model of the same family, on the CPU).

sglang's pool keeps one conv tensor and one temporal tensor per mamba layer j (pool index j =
rank among the mamba layers, sglang's `mamba_map`); transformers keeps the same quantities in
its cache layer (`conv_states[0]`, `recurrent_states[0]`), from the same checkpoint. Per family:

Qwen3-Next and Qwen3.5 (gated delta net):
- sglang `conv[0][j, slot]`: bf16 [conv_dim, kernel - 1], the last kernel - 1 conv inputs
  (zero-padded on the left for shorter prefixes), channels q | k | v (all key heads, all key
  heads, all value heads: `torch.cat((query, key, value))` / Qwen3.5's `in_proj_qkv` rows);
- sglang `temporal[j, slot]`: fp32 [HV, V, K], the gated-delta-rule state S with S k giving a
  value (kernels/cpu_ops/gated_delta_rule.py);
- transformers: `conv_states[0]` [1, conv_dim, kernel] (one input more than sglang) and
  `recurrent_states[0]` [1, HV, K, V] (`key^T @ v`: K before V). Mapping: `conv[..., 1:]`,
  `recurrent.transpose(-1, -2)`.

NemotronH (Mamba2):
- sglang `conv[0][j, slot]`: bf16 [conv_dim, kernel - 1], channels x | B | C (intermediate
  size = heads x head dim, then n_groups x d_state twice: MambaMixer2's split);
- sglang `temporal[j, slot]`: fp32 [H, P, N] (heads, head dim, d_state), S_t = exp(A dt) S +
  dt x B^T (kernels/cpu_ops/selective_scan.py);
- transformers `NemotronHMamba2Mixer`: `conv_states[0]` [1, conv_dim, kernel], same channel
  order (its `in_proj` split is sglang's), `recurrent_states[0]` [1, H, P, N]. Mapping:
  `conv[..., 1:]`, the recurrent state as is.

Nothing else is permuted. Results are exact up to the rounding differences of two
implementations (bf16 activations through the layers before a state).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..families import NEMOTRON_H, family_of_architecture

DEFAULT_CACHE_ENTRIES = 512
"""States kept by prefix; each is a few KB for the tiny model."""


class PrefixState(NamedTuple):
    """The mamba state after a prefix, in sglang's pool layout without the slot dimension."""

    conv: torch.Tensor
    """bf16 [num_mamba_layers, conv_dim, kernel - 1]."""
    temporal: torch.Tensor
    """fp32 [num_mamba_layers, ...]: [HV, V, K] (gated delta net) or [H, P, N] (Mamba2)."""


class UnsupportedModel(ValueError):
    """The checkpoint is not of a family the oracle maps (the message names its architecture)."""


def prefix_key(tokens: Sequence[int]) -> bytes:
    """Cache key of a prefix (its length is part of the hashed bytes)."""
    data = torch.tensor(list(tokens), dtype=torch.int64).numpy().tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()


def _gdn_temporal(recurrent: torch.Tensor) -> torch.Tensor:
    return recurrent.transpose(-1, -2)  # [HV, K, V] -> sglang's [HV, V, K]


def _mamba2_temporal(recurrent: torch.Tensor) -> torch.Tensor:
    return recurrent  # [H, P, N] on both sides


_LINEAR_KINDS = ("linear_attention", "mamba")


class RecomputeOracle:
    """Runs the tiny model with transformers and returns prefix states in sglang's layout."""

    def __init__(self, model_path: str | Path, *, cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(model_path))
        architecture = (getattr(config, "architectures", None) or ["?"])[0]
        family = family_of_architecture(architecture)
        if family is None:
            raise UnsupportedModel(f"no recompute oracle for {architecture}")
        self.family = family
        model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.bfloat16)
        self.model = model.model.eval()  # the decoder stack alone: logits are not needed
        self._temporal: Callable[[torch.Tensor], torch.Tensor] = _mamba2_temporal if family is NEMOTRON_H else _gdn_temporal
        # All layers stay, although none after the last mamba one affects a state:
        # transformers' hybrid cache needs an attention layer to count positions.
        # (transformers 5.19 names Mamba2 mixers "linear_attention" too; 5.12 "mamba".)
        self.linear_layers = [i for i, kind in enumerate(model.config.layer_types) if kind in _LINEAR_KINDS]
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
        out = self.model(input_ids=torch.tensor([list(tokens)], dtype=torch.int64), use_cache=True)
        result = self.read_cache(out.past_key_values)
        self._cache[key] = result
        if len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)
        return result

    def read_cache(self, cache: Any) -> PrefixState:
        """The mamba state in a transformers cache, in sglang's layout (see the module docstring)."""
        layers = [cache.layers[i] for i in self.linear_layers]
        conv = torch.stack([_batch_of(layer.conv_states)[0, :, 1:] for layer in layers])
        temporal = torch.stack([self._temporal(_batch_of(layer.recurrent_states)[0]) for layer in layers])
        return PrefixState(conv.to(torch.bfloat16).contiguous(), temporal.float().contiguous())

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


def _batch_of(states: Any) -> torch.Tensor:
    """A cache layer's state as [batch, ...]: transformers 5.19 keeps them by state index (a dict; one per
    state tensor), 5.12 (the MambaRadixCache releases' pin) the tensor itself."""
    return states[0] if isinstance(states, dict | list | tuple) else states
