"""The tiny NemotronH: two Mamba2 layers, one attention layer, ReLU^2 MLPs (no MoE)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from . import state_memory
from .tiny_spec import TinySpec, rewrite_config, save

_PATTERN_CHARS = {"linear_attention": "M", "full_attention": "*", "mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
"""transformers' layer kinds as NemotronH's pattern characters (sglang reads the pattern): 5.19's
names, and 5.12's ("mamba", "attention"; the MambaRadixCache releases' venvs pin 5.12.1)."""
MAMBA_KINDS = ("linear_attention", "mamba")


@dataclass(frozen=True)
class TinyNemotronHSpec(TinySpec):
    """Dimensions of the tiny NemotronH; every field goes into the cache key."""

    family: ClassVar[str] = "nemotron-h"
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    hybrid_override_pattern: str = "M-M*-"  # mamba, mlp, mamba, attention, mlp
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    mamba_num_heads: int = 4
    mamba_head_dim: int = 16
    n_groups: int = 2
    ssm_state_size: int = 16
    conv_kernel: int = 4
    chunk_size: int = 64
    """sglang's mamba_chunk_size: the grid of the chunked scan and of extra_buffer's checkpoints."""
    max_position_embeddings: int = 4096
    state_decay: float = 0.9995
    """Per-token decay of the SSM state (state_memory.py)."""
    seed: int = 0

    def write(self, out_dir: Path) -> None:
        import torch
        from transformers import NemotronHConfig, NemotronHForCausalLM

        config = NemotronHConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            hybrid_override_pattern=self.hybrid_override_pattern,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            mamba_num_heads=self.mamba_num_heads,
            mamba_head_dim=self.mamba_head_dim,
            n_groups=self.n_groups,
            ssm_state_size=self.ssm_state_size,
            conv_kernel=self.conv_kernel,
            chunk_size=self.chunk_size,
            # transformers clamps dt below at time_step_min, sglang does not clamp: keep it inert
            time_step_min=1e-9,
            max_position_embeddings=self.max_position_embeddings,
            dtype="bfloat16",
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        )
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(self.seed)
            model = NemotronHForCausalLM(config)
            for layer in model.model.layers:
                if layer.block_type in MAMBA_KINDS:  # transformers 5.19 calls Mamba2 mixers linear attention
                    layer.mixer.A_log.copy_(state_memory.a_log_for(self.state_decay, self.mamba_num_heads))
                    layer.mixer.dt_bias.zero_()
            model = model.to(torch.bfloat16)
        save(model, out_dir)
        _embeddings_as_sglang_reads_them(out_dir)
        rewrite_config(out_dir, sglang_keys(config), drop=("layers_block_type", "mtp_layers_block_type"))


def sglang_keys(config: object) -> dict:
    """The keys sglang 0.5.23's NemotronHConfig reads, under its (legacy) names, which
    transformers accepts too; transformers' own `layers_block_type` names are not sglang's."""
    return {
        "hybrid_override_pattern": "".join(_PATTERN_CHARS[kind] for kind in config.layers_block_type),
        "mamba_n_groups": config.n_groups,
        "mamba_d_conv": config.conv_kernel,
        "mamba_expand": config.expand,
        "mamba_chunk_size": config.chunk_size,
        "mamba_dt_min": config.time_step_min,
    }


def _embeddings_as_sglang_reads_them(out_dir: Path) -> None:
    """transformers 5.12 saves the embedding as `backbone.embedding.weight`; sglang's NemotronH
    loader (and transformers 5.19) read `backbone.embeddings.weight`: renamed, the checkpoint is
    5.19's, byte for byte."""
    from safetensors.torch import load_file, save_file

    path = out_dir / "model.safetensors"
    tensors = load_file(path)
    if "backbone.embedding.weight" in tensors:
        tensors["backbone.embeddings.weight"] = tensors.pop("backbone.embedding.weight")
        save_file(tensors, path, metadata={"format": "pt"})
