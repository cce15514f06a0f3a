"""Per-head Gemma RMSNorm of attention q and k (Qwen3.5 full attention `q_norm` / `k_norm`).

Torch versions of `torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_cpu` and
`fused_qk_gemma_rmsnorm_with_gate_cpu` (sgl-kernel's `csrc/cpu/norm.cpp`), which
`sglang/srt/models/qwen3_5.py` binds at import on CPU. Each head_dim-wide head of a row is
normalised on its own: x * rsqrt(mean(x^2) + eps) * (1 + w), in fp32, cast back.
"""

from __future__ import annotations

import torch


def fused_qk_gemma_rmsnorm_cpu(
    q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """q: (tokens, H * head_dim), k: (tokens, Hkv * head_dim); weights (head_dim,).
    Returns normalised q and k with their input shapes and dtypes."""
    return _gemma_per_head(q, q_weight, eps, head_dim), _gemma_per_head(k, k_weight, eps, head_dim)


def fused_qk_gemma_rmsnorm_with_gate_cpu(
    q_gate: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float,
    head_dim: int,
    num_head: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q_gate: (tokens, num_head * 2 * head_dim), per head [q_h | gate_h] (attention output
    gate models); k: (tokens, Hkv * head_dim). Returns q normalised (tokens * num_head,
    head_dim), k normalised (tokens * Hkv, head_dim) and the gate split off unchanged
    (tokens * num_head, head_dim)."""
    if q_gate.shape[-1] != num_head * head_dim * 2:
        raise ValueError(f"q_gate has {q_gate.shape[-1]} columns, expected {num_head} heads x 2 x {head_dim}")
    per_head = q_gate.reshape(-1, num_head, 2, head_dim)
    q = per_head[:, :, 0].reshape(-1, head_dim)
    gate = per_head[:, :, 1].reshape(-1, head_dim).contiguous()
    return _gemma_per_head(q, q_weight, eps, head_dim), _gemma_per_head(k, k_weight, eps, head_dim).reshape(-1, head_dim), gate


def _gemma_per_head(x: torch.Tensor, weight: torch.Tensor, eps: float, head_dim: int) -> torch.Tensor:
    heads = x.float().reshape(-1, head_dim)
    normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())
    return normed.to(x.dtype).reshape(x.shape)
