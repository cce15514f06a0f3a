"""A tiny random-weight Qwen3-Next, written locally and deterministically.

The embedded engine needs a real hybrid model (linear-attention + full-attention layers) that
sglang loads like any other checkpoint, without a hub. transformers writes the config and the
safetensors from a fixed seed; the result is cached in the user cache dir and rewritten when
missing or incomplete. Same spec + same seed -> byte-identical weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

WRITER_VERSION = 2
"""Bumped when write_tiny_model changes what it writes; part of the cache key."""

MODEL_FILES = ("config.json", "model.safetensors")
"""What a complete model directory holds (checked before reuse)."""


@dataclass(frozen=True)
class TinyQwen3NextSpec:
    """Dimensions of the tiny model; every field goes into the cache key."""

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
    seed: int = 0

    def cache_key(self) -> str:
        blob = json.dumps({**asdict(self), "writer": WRITER_VERSION}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def default_cache_dir() -> Path:
    """`$MCINSPECT_CACHE_DIR`, else `$XDG_CACHE_HOME/mcinspect`, else `~/.cache/mcinspect`."""
    explicit = os.environ.get("MCINSPECT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mcinspect"


def ensure_tiny_model(spec: TinyQwen3NextSpec | None = None, cache_dir: Path | None = None) -> Path:
    """Return the directory of the tiny model, writing it first if it is missing."""
    spec = spec or TinyQwen3NextSpec()
    target = (cache_dir or default_cache_dir()) / "models" / f"tiny-qwen3-next-{spec.cache_key()}"
    if all((target / name).is_file() for name in MODEL_FILES):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename: concurrent writers (parallel tests) never see a
    # half-written model, and the last rename wins with identical content.
    scratch = Path(tempfile.mkdtemp(prefix=".tiny-qwen3-next-", dir=target.parent))
    try:
        write_tiny_model(spec, scratch)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def write_tiny_model(spec: TinyQwen3NextSpec, out_dir: Path) -> None:
    """Write config.json + model.safetensors for `spec` into `out_dir`."""
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        full_attention_interval=spec.full_attention_interval,
        layer_types=[
            "full_attention" if (i + 1) % spec.full_attention_interval == 0 else "linear_attention"
            for i in range(spec.num_hidden_layers)
        ],
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        linear_num_key_heads=spec.linear_num_key_heads,
        linear_num_value_heads=spec.linear_num_value_heads,
        linear_key_head_dim=spec.linear_key_head_dim,
        linear_value_head_dim=spec.linear_value_head_dim,
        linear_conv_kernel_dim=spec.linear_conv_kernel_dim,
        num_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        moe_intermediate_size=spec.moe_intermediate_size,
        shared_expert_intermediate_size=spec.shared_expert_intermediate_size,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=spec.max_position_embeddings,
        dtype="bfloat16",
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    # Private generator state: seeding must not disturb (or depend on) the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen3NextForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    missing = [name for name in MODEL_FILES if not (out_dir / name).is_file()]
    if missing:
        raise RuntimeError(f"transformers did not write {missing} into {out_dir}")
