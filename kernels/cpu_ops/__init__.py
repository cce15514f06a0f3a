"""Torch CPU versions of the kernels sglang 0.5.23 needs to run its hybrid models on a plain CPU.

`SGL_KERNEL_MAMBA_OPS` is what `sgl_kernel.mamba` must provide, `SGL_KERNEL_TORCH_OPS` what
`torch.ops.sgl_kernel.<name>` must provide (PyPI's sglang-kernel has CUDA builds only),
`TRITON_REPLACEMENTS` maps an sglang module to the module globals that name Triton kernels
its callers reach even on CPU, with the torch function to put in their place, and
`ACCELERATOR_ONLY_NAMES` the globals a module binds only on CUDA / NPU / XPU although its
code calls them on CPU too, with the torch function to bind there.
"""

from __future__ import annotations

from collections.abc import Callable

from .causal_conv1d import causal_conv1d_fn_cpu, causal_conv1d_update_cpu
from .gated_delta_rule import (
    chunk_gated_delta_rule_cpu,
    fused_gdn_gating_cpu,
    fused_sigmoid_gating_delta_rule_update_cpu,
)
from .gdn_projection import fused_qkvzba_split_reshape_cat_contiguous_cpu
from .moe_gate import fused_gate_sigmoid_mul, fused_gate_sigmoid_mul_add
from .output_gate import fused_sigmoid_mul_cpu
from .qk_norm import fused_qk_gemma_rmsnorm_cpu, fused_qk_gemma_rmsnorm_with_gate_cpu
from .rmsnorm_gated import fused_rmsnorm_gated_cpu
from .selective_scan import mamba_chunk_scan_combined_cpu, selective_state_update_cpu
from .state_tracking import track_mamba_states_all_layers, track_mamba_states_if_needed

SGL_KERNEL_MAMBA_OPS: dict[str, Callable] = {
    "causal_conv1d_fn_cpu": causal_conv1d_fn_cpu,
    "causal_conv1d_update_cpu": causal_conv1d_update_cpu,
    "chunk_gated_delta_rule_cpu": chunk_gated_delta_rule_cpu,
}

SGL_KERNEL_TORCH_OPS: dict[str, Callable] = {
    "fused_gdn_gating_cpu": fused_gdn_gating_cpu,
    "fused_sigmoid_gating_delta_rule_update_cpu": fused_sigmoid_gating_delta_rule_update_cpu,
    "fused_rmsnorm_gated_cpu": fused_rmsnorm_gated_cpu,
    # Qwen3.5 (models/qwen3_5.py binds these four at import on CPU)
    "fused_sigmoid_mul_cpu": fused_sigmoid_mul_cpu,
    "fused_qk_gemma_rmsnorm_cpu": fused_qk_gemma_rmsnorm_cpu,
    "fused_qk_gemma_rmsnorm_with_gate_cpu": fused_qk_gemma_rmsnorm_with_gate_cpu,
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": fused_qkvzba_split_reshape_cat_contiguous_cpu,
}

TRITON_REPLACEMENTS: dict[str, dict[str, Callable]] = {
    # Decode-time state tracking under extra_buffer (imported by name into this module).
    "sglang.srt.layers.attention.hybrid_linear_attn_backend": {
        "track_mamba_states_all_layers": track_mamba_states_all_layers,
        "track_mamba_states_if_needed": track_mamba_states_if_needed,
    },
    # Mamba2 (NemotronH): the SSD prefill scan and the decode state update.
    "sglang.srt.layers.attention.mamba.mamba": {
        "mamba_chunk_scan_combined": mamba_chunk_scan_combined_cpu,
        "selective_state_update": selective_state_update_cpu,
    },
    # Shared-expert gate: Triton unless the gate layer was packed for AMX.
    "sglang.srt.models.qwen2_moe": {
        "fused_gate_sigmoid_mul": fused_gate_sigmoid_mul,
        "fused_gate_sigmoid_mul_add": fused_gate_sigmoid_mul_add,
    },
}

ACCELERATOR_ONLY_NAMES: dict[str, dict[str, Callable]] = {
    # Mamba2's causal conv: imported under `if is_cuda() / is_npu() / is_xpu()` only, and
    # NemotronH asks for the `_triton` pair; our ops follow the Triton kernels' semantics.
    "sglang.srt.layers.attention.mamba.mamba": {
        "causal_conv1d_fn": causal_conv1d_fn_cpu,
        "causal_conv1d_update": causal_conv1d_update_cpu,
        "causal_conv1d_fn_triton": causal_conv1d_fn_cpu,
        "causal_conv1d_update_triton": causal_conv1d_update_cpu,
    },
}

__all__ = ["ACCELERATOR_ONLY_NAMES", "SGL_KERNEL_MAMBA_OPS", "SGL_KERNEL_TORCH_OPS", "TRITON_REPLACEMENTS"]
