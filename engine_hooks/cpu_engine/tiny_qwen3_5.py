"""The tiny Qwen3.5 (text): two gated-delta-net layers, one gated full-attention layer, dense MLPs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from . import state_memory
from .tiny_qwen3_next import build_gdn_model, layer_types
from .tiny_spec import TinySpec, rewrite_config, save


@dataclass(frozen=True)
class TinyQwen35Spec(TinySpec):
    """Dimensions of the tiny Qwen3.5; every field goes into the cache key."""

    family: ClassVar[str] = "qwen3.5"
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 3
    full_attention_interval: int = 3
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 2
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel_dim: int = 4
    max_position_embeddings: int = 4096
    state_decay: float = 0.9995
    """Per-token decay of the recurrent state (state_memory.py)."""
    write_strength: float = 0.01
    """The delta rule's beta: the share of the state each token overwrites along its key."""
    mixer_weight_std: float = 0.05
    """Weight std of the gated delta nets (state_memory.py); the rest keeps transformers' 0.02."""
    seed: int = 0

    def write(self, out_dir: Path) -> None:
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        config = Qwen3_5TextConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            layer_types=layer_types(self.num_hidden_layers, self.full_attention_interval),
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            linear_num_key_heads=self.linear_num_key_heads,
            linear_num_value_heads=self.linear_num_value_heads,
            linear_key_head_dim=self.linear_key_head_dim,
            linear_value_head_dim=self.linear_value_head_dim,
            linear_conv_kernel_dim=self.linear_conv_kernel_dim,
            max_position_embeddings=self.max_position_embeddings,
            dtype="bfloat16",
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        model = build_gdn_model(Qwen3_5ForCausalLM, config, self.seed, lambda gdn, bias: remember_gdn_qwen3_5(gdn, self, bias))
        save(model, out_dir)
        # sglang's Qwen3.5 config derives its layer kinds from this key, transformers from layer_types
        rewrite_config(out_dir, {"full_attention_interval": self.full_attention_interval})


def remember_gdn_qwen3_5(gdn: object, spec: TinyQwen35Spec, bias: float) -> None:
    """Slow decay and a weak delta-rule write for one Qwen3.5 gated delta net (in place);
    Qwen3.5 projects b with its own `in_proj_b`."""
    projections = ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "conv1d", "out_proj")
    state_memory.strengthen([getattr(gdn, name) for name in projections], spec.mixer_weight_std)
    for name in ("in_proj_qkv", "in_proj_z", "in_proj_a"):
        state_memory.read_bias_channel(getattr(gdn, name).weight, None, 0.0, bias)
    logit = state_memory.write_logit(spec.write_strength)
    state_memory.read_bias_channel(gdn.in_proj_b.weight, slice(None), logit, bias)
    gdn.A_log.copy_(state_memory.a_log_for(spec.state_decay, spec.linear_num_value_heads))
    gdn.dt_bias.zero_()
