"""SiLU-gated RMSNorm applied to the linear-attention output (Qwen3-Next `self.norm`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_rmsnorm_gated_cpu(x: torch.Tensor, weight: torch.Tensor | None, g: torch.Tensor | None, eps: float) -> torch.Tensor:
    """rmsnorm(x) * weight * silu(g) over the last dim, normalising before gating.

    The `torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu(x, weight, g, eps)` call of
    `FusedRMSNormGated` (fla/fused_norm_gate.py) and of the gated `RMSNorm` in
    fla/layernorm_gated.py: both allow only SiLU and norm-before-gate there. `weight` is
    None without an elementwise affine, `g` None when `RMSNorm` gets no gate. Computed in
    fp32 like the Triton kernel; returns x's dtype.
    """
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if g is not None:
        y = y * F.silu(g.float())
    return y.to(x.dtype)
