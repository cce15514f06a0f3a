"""The tiny Qwen3-Next: two gated-delta-net layers, one full-attention layer, a small MoE."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from . import state_memory
from .tiny_spec import TinySpec, save


@dataclass(frozen=True)
class TinyQwen3NextSpec(TinySpec):
    """Dimensions of the tiny Qwen3-Next; every field goes into the cache key."""

    family: ClassVar[str] = "qwen3-next"
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 3
    full_attention_interval: int = 3  # sglang derives layer types from it: linear, linear, full
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 2
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel_dim: int = 4
    num_experts: int = 4
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 32
    shared_expert_intermediate_size: int = 32
    max_position_embeddings: int = 4096
    state_decay: float = 0.9995
    """Per-token decay of the recurrent state (state_memory.py)."""
    write_strength: float = 0.01
    """The delta rule's beta: the share of the state each token overwrites along its key."""
    mixer_weight_std: float = 0.05
    """Weight std of the gated delta nets (state_memory.py); the rest keeps transformers' 0.02."""
    seed: int = 0

    def write(self, out_dir: Path) -> None:
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

        config = Qwen3NextConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            full_attention_interval=self.full_attention_interval,
            layer_types=layer_types(self.num_hidden_layers, self.full_attention_interval),
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            linear_num_key_heads=self.linear_num_key_heads,
            linear_num_value_heads=self.linear_num_value_heads,
            linear_key_head_dim=self.linear_key_head_dim,
            linear_value_head_dim=self.linear_value_head_dim,
            linear_conv_kernel_dim=self.linear_conv_kernel_dim,
            num_experts=self.num_experts,
            num_experts_per_tok=self.num_experts_per_tok,
            moe_intermediate_size=self.moe_intermediate_size,
            shared_expert_intermediate_size=self.shared_expert_intermediate_size,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            max_position_embeddings=self.max_position_embeddings,
            dtype="bfloat16",
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        model = build_gdn_model(Qwen3NextForCausalLM, config, self.seed, lambda gdn, bias: remember_gdn_qwen3_next(gdn, self, bias))
        save(model, out_dir)


def build_gdn_model(model_class: Any, config: object, seed: int, remember: Callable[[Any, float], None]) -> Any:
    """A seeded bf16 model whose gated delta nets remember (`remember(gdn, bias)` on each), with
    the embedding's bias channel they read; shared by the GDN families' writers."""
    import torch

    # Private generator state: seeding must not disturb (or depend on) the caller's RNG.
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        model = model_class(config)
        state_memory.add_bias_channel(model.model.embed_tokens.weight, model.lm_head.weight)
        bias = state_memory.normalised_bias(model.model.embed_tokens.weight)
        for layer in model.model.layers:
            if hasattr(layer, "linear_attn"):
                remember(layer.linear_attn, bias)
        return model.to(torch.bfloat16)


def remember_gdn_qwen3_next(gdn: object, spec: TinyQwen3NextSpec, bias: float) -> None:
    """Slow decay and a weak delta-rule write for one Qwen3-Next gated delta net (in place).

    in_proj_ba's rows come in key-head groups of [b (HV / HK rows) | a (HV / HK rows)]
    (`fix_query_key_value_ordering`): the b rows read the bias channel."""
    heads_per_group = spec.linear_num_value_heads // spec.linear_num_key_heads
    b_rows = [g * 2 * heads_per_group + i for g in range(spec.linear_num_key_heads) for i in range(heads_per_group)]
    state_memory.strengthen((gdn.in_proj_qkvz, gdn.in_proj_ba, gdn.conv1d, gdn.out_proj), spec.mixer_weight_std)
    state_memory.read_bias_channel(gdn.in_proj_qkvz.weight, None, 0.0, bias)
    state_memory.read_bias_channel(gdn.in_proj_ba.weight, b_rows, state_memory.write_logit(spec.write_strength), bias)
    gdn.A_log.copy_(state_memory.a_log_for(spec.state_decay, spec.linear_num_value_heads))
    gdn.dt_bias.zero_()


def layer_types(num_layers: int, full_attention_interval: int) -> list[str]:
    """transformers' layer kinds for sglang's `full_attention_interval` rule."""
    return ["full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention" for i in range(num_layers)]
