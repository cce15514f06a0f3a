"""CPU-engine patches for the MambaRadixCache releases (sglang 0.5.12-0.5.15), where the ops
patches.py replaces sit elsewhere. Applied by patches.install() (MCINSPECT_CPU_ENGINE=1 only),
each a no-op on a release without its target."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from mcinspect_kernels.cpu_ops.state_tracking import track_mamba_states_if_needed


def validate_extra_buffer_off_gpu(original: Callable[..., Any]) -> Callable[..., Any]:
    """Reason: these releases refuse extra_buffer in `ServerArgs._validate_mamba_extra_buffer`
    with `assert is_cuda() or is_musa() or is_npu()` (later ones moved the test to
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


class _Launch:
    """Stands in for a Triton kernel launched as `kernel[grid](...)`: runs `fn` once."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self.fn


def _alloc_extend(prefix_lens: Any, seq_lens: Any, last_loc: Any, free_pages: Any, out: Any, _bs: int, page_size: int) -> None:
    """The paged KV allocator's extend kernel in torch: each request fills the rest of its last
    page, then whole new pages, then a partial one, new pages taken in order from `free_pages`
    (sglang's own `alloc_extend_naive`, which these releases do not call)."""
    import torch

    positions = torch.arange(page_size, device=out.device)
    page_start = 0
    token = 0
    for prefix, seq, last in zip(prefix_lens.tolist(), seq_lens.tolist(), last_loc.tolist()):
        in_last_page = min(seq, -(-prefix // page_size) * page_size) - prefix
        out[token : token + in_last_page] = last + 1 + positions[:in_last_page]
        new_pages = -(-seq // page_size) - -(-prefix // page_size)
        rest = seq - prefix - in_last_page
        if rest:
            pages = free_pages[page_start : page_start + new_pages]
            out[token + in_last_page : token + in_last_page + rest] = (pages.view(-1, 1) * page_size + positions).view(-1)[:rest]
        page_start += new_pages
        token += seq - prefix


def _alloc_decode(seq_lens: Any, last_loc: Any, free_pages: Any, out: Any, _bs: int, page_size: int) -> None:
    """The decode kernel in torch: a request whose new token starts a page takes the next free
    page (in batch order), the others the slot after their last one."""
    import torch

    starts_page = (seq_lens - 1) % page_size == 0
    rank = torch.cumsum(starts_page.to(torch.int64), 0) - 1
    pages = free_pages[rank.clamp(min=0)] if len(free_pages) else torch.zeros_like(rank)
    out.copy_(torch.where(starts_page, pages * page_size, last_loc + 1))


PAGED_KERNELS = {"alloc_extend_kernel": _Launch(_alloc_extend), "alloc_decode_kernel": _Launch(_alloc_decode)}
REPLACEMENTS: dict[str, dict[str, Any]] = {
    # Reason: the paged KV allocator of these releases launches Triton kernels on every device
    # (later ones take torch versions on CPU); a CPU-only Triton has no driver to launch them.
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

WRAPPERS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "sglang.srt.server_args": {"ServerArgs._validate_mamba_extra_buffer": validate_extra_buffer_off_gpu},
}
"""Module -> {Class.method: wrapper factory}, applied right after the module executes when the
release has the method."""
