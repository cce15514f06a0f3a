"""Torch versions of sglang's Triton page-allocation kernels (`alloc_extend_kernel`,
`alloc_decode_kernel`), for sglang 0.5.21, whose paged allocator launches them on every device
(0.5.22 calls its torch fallbacks `alloc_extend_naive` / `alloc_decode_naive` there, which these
follow; 0.5.21 has the first but never calls it, nor has the second).

Called as the kernels are, `kernel[grid](*args)`. 0.5.21 launches a kernel before it checks that
the free list holds enough pages, and discards the result when it does not: out-of-range page
reads are clamped here (where the Triton kernel read past the list), never raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class _Launch:
    """`kernel[grid](*args)` for a torch function: the grid is the batch, implicit here."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return self.fn


def _page(free_pages: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """free_pages[index], clamped into the list (0 where it is empty: a result sglang discards)."""
    if free_pages.numel() == 0:
        return torch.zeros_like(index)
    return free_pages[index.clamp(0, free_pages.numel() - 1)]


def _alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, bs_upper, page_size) -> None:  # noqa: ANN001
    """Per request: fill the partial last page of its prefix, then whole new pages, then a new
    partial page, taking new pages from the front of `free_pages` in request order."""
    n = out_indices.shape[0]
    if n == 0:
        return
    extend_lens = seq_lens - prefix_lens
    end_pos = torch.cumsum(extend_lens, 0)
    start_pos = end_pos - extend_lens
    j = torch.arange(n, device=out_indices.device, dtype=torch.int64)
    owner = torch.searchsorted(end_pos, j, right=True)
    local = j - start_pos[owner]
    ceil_prefix = (prefix_lens + page_size - 1) // page_size * page_size
    floor_seq = seq_lens // page_size * page_size
    num1 = torch.clamp(seq_lens, max=ceil_prefix) - prefix_lens
    done_after_1 = (prefix_lens + num1) == seq_lens
    num2 = torch.where(done_after_1, torch.zeros_like(num1), floor_seq - ceil_prefix)
    num3 = torch.where(done_after_1, torch.zeros_like(num1), seq_lens - floor_seq)
    pages_per_req = num2 // page_size + (num3 > 0).to(torch.int64)
    end_new_pages = torch.cumsum(pages_per_req, 0)
    start_new_pages = end_new_pages - pages_per_req
    num1_g, num2_g = num1[owner], num2[owner]
    phase1 = local < num1_g
    phase2 = (~phase1) & (local < num1_g + num2_g)
    rel2 = torch.clamp(local - num1_g, min=0)
    val2 = _page(free_pages, start_new_pages[owner] + rel2 // page_size) * page_size + rel2 % page_size
    rel3 = torch.clamp(local - num1_g - num2_g, min=0)
    val3 = _page(free_pages, end_new_pages[owner] - 1) * page_size + rel3
    out_indices.copy_(torch.where(phase1, last_loc[owner] + 1 + local, torch.where(phase2, val2, val3)))


def _alloc_decode(seq_lens, last_loc, free_pages, out_indices, bs_upper, page_size) -> None:  # noqa: ANN001
    """Per request: the slot after its last one, or a new page's first slot when it starts one."""
    new_page = (seq_lens - 1) % page_size == 0
    rank = torch.cumsum(new_page.to(torch.int64), 0) - new_page.to(torch.int64)
    out_indices.copy_(torch.where(new_page, _page(free_pages, rank) * page_size, last_loc + 1))


alloc_extend_kernel_cpu = _Launch(_alloc_extend)
alloc_decode_kernel_cpu = _Launch(_alloc_decode)
