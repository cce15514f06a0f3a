"""Sigmoid output gate of attention (Qwen3.5 full attention with `attn_output_gate`).

Torch version of `torch.ops.sgl_kernel.fused_sigmoid_mul_cpu` (sgl-kernel's CPU
elementwise ops), which `sglang/srt/models/qwen3_5.py` binds at import on CPU.
"""

from __future__ import annotations

import torch


def fused_sigmoid_mul_cpu(x: torch.Tensor, gate: torch.Tensor) -> None:
    """x *= sigmoid(gate) in place, computed in fp32; gate has x's shape."""
    x.copy_(x.float() * torch.sigmoid(gate.float()))
