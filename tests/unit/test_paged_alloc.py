"""The torch page-allocation kernels for sglang 0.5.21's paged allocator give what sglang's own
torch fallbacks of 0.5.22 on (`alloc_extend_naive`, `alloc_decode_naive`) give."""

from __future__ import annotations

import torch

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()

from sglang.srt.mem_cache.allocator.paged import alloc_decode_naive, alloc_extend_naive  # noqa: E402

from mcinspect_kernels.cpu_ops.paged_alloc import alloc_decode_kernel_cpu, alloc_extend_kernel_cpu  # noqa: E402


def _batch(gen: torch.Generator, page_size: int, bs: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    prefix = torch.randint(0, 40, (bs,), generator=gen)
    seq = prefix + torch.randint(1, 40, (bs,), generator=gen)
    # each request's prefix ends in its own page run: last_loc's page offset matches prefix_len's
    base = torch.arange(bs) * 1000 + 500
    last_loc = base * page_size + (prefix - 1) % page_size
    return prefix, seq, last_loc


def test_extend_and_decode_match_sglangs_own_torch_fallbacks() -> None:
    gen = torch.Generator().manual_seed(0)
    for page_size in (1, 4, 16):
        for bs in (1, 3, 7):
            prefix, seq, last_loc = _batch(gen, page_size, bs)
            free_pages = torch.randperm(200, generator=gen) + 1
            n = int((seq - prefix).sum())
            ours, theirs = torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64)
            alloc_extend_kernel_cpu[(bs,)](prefix, seq, last_loc, free_pages, ours, 8, page_size)
            alloc_extend_naive(prefix, seq, last_loc, free_pages, theirs, page_size, "cpu")
            assert torch.equal(ours, theirs)
            decode_lens = seq + 1
            decode_last = last_loc + (seq - prefix)
            new_pages = int(((decode_lens - 1) % page_size == 0).sum())
            ours, theirs = torch.empty(bs, dtype=torch.int64), torch.empty(bs, dtype=torch.int64)
            alloc_decode_kernel_cpu[(bs,)](decode_lens, decode_last, free_pages, ours, 8, page_size)
            alloc_decode_naive(decode_lens, decode_last, free_pages, theirs, page_size, new_pages)
            assert torch.equal(ours, theirs)


def test_a_short_free_list_gives_a_result_to_discard_instead_of_raising() -> None:
    """0.5.21 launches before it checks the free list and drops the result when it is short."""
    prefix, seq = torch.tensor([0, 0]), torch.tensor([40, 40])
    out = torch.empty(80, dtype=torch.int64)
    alloc_extend_kernel_cpu[(2,)](prefix, seq, torch.tensor([-1, -1]), torch.tensor([3]), out, 2, 16)
    alloc_extend_kernel_cpu[(2,)](prefix, seq, torch.tensor([-1, -1]), torch.tensor([], dtype=torch.int64), out, 2, 16)
    alloc_decode_kernel_cpu[(2,)](torch.tensor([17, 33]), torch.tensor([15, 31]), torch.tensor([], dtype=torch.int64), out[:2], 2, 16)
