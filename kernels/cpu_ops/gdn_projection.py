"""Unpacking the fused input projection of Qwen3.5's gated delta net.

Torch version of `torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_contiguous_cpu`, which
`sglang/srt/models/qwen3_5.py` binds at import on CPU; the layouts are those of the Triton
`fused_qkvzba_split_reshape_cat_contiguous` (`sglang/kernels/ops/attention/triton_gdn_fused_proj.py`).
"""

from __future__ import annotations

import torch


def fused_qkvzba_split_reshape_cat_contiguous_cpu(
    mixed_qkvz: torch.Tensor, mixed_ba: torch.Tensor, num_heads_qk: int, num_heads_v: int, head_qk: int, head_v: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """mixed_qkvz: (tokens, [all q | all k | all v | all z]); mixed_ba: (tokens, [all b | all a]).

    Returns contiguous (mixed_qkv (tokens, [q | k | v]), z (tokens, num_heads_v, head_v),
    b (tokens, num_heads_v), a (tokens, num_heads_v)), in the inputs' dtypes.
    """
    qkv_dim = 2 * num_heads_qk * head_qk + num_heads_v * head_v
    expected = qkv_dim + num_heads_v * head_v
    if mixed_qkvz.shape[-1] != expected or mixed_ba.shape[-1] != 2 * num_heads_v:
        raise ValueError(f"projection widths {mixed_qkvz.shape[-1]}, {mixed_ba.shape[-1]}; expected {expected}, {2 * num_heads_v}")
    tokens = mixed_qkvz.shape[0]
    mixed_qkv = mixed_qkvz[:, :qkv_dim].contiguous()
    z = mixed_qkvz[:, qkv_dim:].reshape(tokens, num_heads_v, head_v).contiguous()
    return mixed_qkv, z, mixed_ba[:, :num_heads_v].contiguous(), mixed_ba[:, num_heads_v:].contiguous()
