"""CPU-engine patches for the MambaRadixCache releases (sglang 0.5.10-0.5.15), where the ops
patches.py replaces sit elsewhere. Applied by patches.install() (MCINSPECT_CPU_ENGINE=1 only),
each a no-op on a release without its target."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from mcinspect_kernels.cpu_ops.paged_alloc import alloc_decode_kernel_cpu, alloc_extend_kernel_cpu
from mcinspect_kernels.cpu_ops.state_tracking import track_mamba_states_if_needed


def validate_extra_buffer_off_gpu(original: Callable[..., Any]) -> Callable[..., Any]:
    """Reason: these releases refuse extra_buffer in `ServerArgs._validate_mamba_extra_buffer`
    (0.5.13: in `_handle_mamba_radix_cache`, whose only platform test it is) with
    `assert is_cuda() or is_musa() or is_npu()` (later ones moved the test to
    `_platform_supports_mamba_cache_extra_buffer`, patched in patches.py); the CPU engine runs
    its state tracking with torch ops. Every other assertion of the validator still runs: only
    the platform test answers True, for the call's duration."""

    @functools.wraps(original)
    def validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        module = sys.modules[original.__module__]
        platform_test = module.is_cuda
        module.is_cuda = lambda: True
        try:
            return original(self, *args, **kwargs)
        finally:
            module.is_cuda = platform_test

    return validate


def gated_norm_on_cpu(original: Callable[..., Any]) -> Callable[..., Any]:
    """Reason: 0.5.10's `FusedRMSNormGated.forward` has no CPU branch (0.5.11 added
    `if _use_cpu: torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu(x, weight, g, eps)`, which
    patches.py's `_use_cpu` selects), so it launches the Triton kernel on CPU. This is that
    branch, SiLU only as there; a release that has the branch keeps its own forward."""
    if "_use_cpu" in original.__code__.co_names:
        return original

    @functools.wraps(original)
    def forward(self: Any, x: Any, g: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        assert self.activation == "silu", "CPU rmsnorm_gated currently only supports activation silu"  # sglang's own
        return torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu(x, self.weight, g, self.eps)

    return forward


PAGED_KERNELS = {"alloc_extend_kernel": alloc_extend_kernel_cpu, "alloc_decode_kernel": alloc_decode_kernel_cpu}
REPLACEMENTS: dict[str, dict[str, Any]] = {
    # Reason: the paged KV allocator of these releases launches Triton kernels on every device
    # (as 0.5.21's does: patches.py; later ones take torch versions on CPU).
    "sglang.srt.mem_cache.triton_ops.allocator": PAGED_KERNELS,  # 0.5.13-0.5.15
    "sglang.srt.mem_cache.allocator": PAGED_KERNELS,  # 0.5.12 (a module; a package later)
    # Reason: the decode state-tracking copy is Triton-only; these releases import it by name
    # from here into the attention backend (kernels/cpu_ops has the torch version).
    "sglang.srt.layers.attention.mamba.mamba_state_scatter_triton": {"track_mamba_states_if_needed": track_mamba_states_if_needed},
    # Reason: as patches.py's `_use_cpu` for gated RMSNorm, where these releases keep the module.
    "sglang.srt.layers.attention.fla.fused_norm_gate": {"_use_cpu": True},
    "sglang.srt.layers.attention.fla.layernorm_gated": {"_use_cpu": True},
}
"""Module -> {attribute: replacement}, applied where the module has the attribute."""

NOT_YET: dict[str, tuple[str, ...]] = {
    "sglang.srt.layers.attention.hybrid_linear_attn_backend": ("track_mamba_states_all_layers",),
    "sglang.srt.models.qwen2_moe": ("fused_gate_sigmoid_mul",),
}
"""Replacements of patches.py that these releases do not have the target of yet (Mamba2's
all-layers copy, the unfused shared-expert gate): applied where present instead of failing."""

DEFINITIONS: dict[str, dict[str, Any]] = {
    # Reason: 0.5.12 imports the FLA chunk size only off the CPU (`if not is_cpu()`), yet its
    # extra_buffer track indices read it on every device (64: fla.chunk_delta_h.CHUNK_SIZE).
    "sglang.srt.layers.attention.hybrid_linear_attn_backend": {"FLA_CHUNK_SIZE": 64},
}
"""Module -> {attribute: value}, defined where the module lacks the attribute."""

WRAPPERS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "sglang.srt.server_args": {
        "ServerArgs._validate_mamba_extra_buffer": validate_extra_buffer_off_gpu,
        "ServerArgs._handle_mamba_radix_cache": validate_extra_buffer_off_gpu,  # 0.5.13
    },
    "sglang.srt.layers.attention.fla.fused_norm_gate": {"FusedRMSNormGated.forward": gated_norm_on_cpu},  # 0.5.10
}
"""Module -> {Class.method: wrapper factory}, applied right after the module executes when the
release has the method."""
