"""Torch CPU versions of the kernels sglang 0.5.23 needs to run Qwen3-Next on a plain CPU.

`SGL_KERNEL_MAMBA_OPS` is what `sgl_kernel.mamba` must provide, `SGL_KERNEL_TORCH_OPS` what
`torch.ops.sgl_kernel.<name>` must provide (PyPI's sglang-kernel has CUDA builds only), and
`TRITON_REPLACEMENTS` maps an sglang module to the module globals that name Triton kernels
its callers reach even on CPU, with the torch function to put in their place.
"""

from __future__ import annotations

from collections.abc import Callable

from .causal_conv1d import causal_conv1d_fn_cpu, causal_conv1d_update_cpu
from .gated_delta_rule import (
    chunk_gated_delta_rule_cpu,
    fused_gdn_gating_cpu,
    fused_sigmoid_gating_delta_rule_update_cpu,
)
from .moe_gate import fused_gate_sigmoid_mul, fused_gate_sigmoid_mul_add
from .rmsnorm_gated import fused_rmsnorm_gated_cpu
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
}

TRITON_REPLACEMENTS: dict[str, dict[str, Callable]] = {
    # Decode-time state tracking under extra_buffer (imported by name into this module).
    "sglang.srt.layers.attention.hybrid_linear_attn_backend": {
        "track_mamba_states_all_layers": track_mamba_states_all_layers,
        "track_mamba_states_if_needed": track_mamba_states_if_needed,
    },
    # Shared-expert gate: Triton unless the gate layer was packed for AMX.
    "sglang.srt.models.qwen2_moe": {
        "fused_gate_sigmoid_mul": fused_gate_sigmoid_mul,
        "fused_gate_sigmoid_mul_add": fused_gate_sigmoid_mul_add,
    },
}

__all__ = ["SGL_KERNEL_MAMBA_OPS", "SGL_KERNEL_TORCH_OPS", "TRITON_REPLACEMENTS"]
