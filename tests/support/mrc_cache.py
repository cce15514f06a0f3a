"""sglang's real MambaRadixCache (the hybrid models' cache up to 0.5.15) over stand-ins for the
allocators it frees into, with a scheduler stand-in holding what a Capture reads (empty free
lists: a capture's slot claims then say "unaccounted"). Needs a release venv of 0.5.12-0.5.15
and the CPU patches (`cpu_engine.patches.install()`) before sglang is first imported."""

from __future__ import annotations

from array import array
from types import SimpleNamespace
from typing import Any

import torch


class Slots:
    """The mamba allocator or KV allocator: what the cache frees into, empty free lists."""

    page_size = 1

    def __init__(self, size: int) -> None:
        self.size = size
        self.freed: list[int] = []
        self.free_slots = self.free_pages = torch.zeros(0, dtype=torch.int64)
        self.release_pages = None

    def free(self, index: torch.Tensor) -> None:
        self.freed += index.reshape(-1).tolist()

    def available_size(self) -> int:
        """Nothing is free (the free lists are empty): what the self-check compares with."""
        return 0


def build_cache(mamba_slots: int = 4096) -> Any:
    """An empty MambaRadixCache (page size 1, no extra buffer) over a pool of `mamba_slots`."""
    from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache

    cache = MambaRadixCache.__new__(MambaRadixCache)
    slots = Slots(mamba_slots)
    pool = SimpleNamespace(mamba_allocator=slots, mamba_pool=slots, req_to_token=torch.zeros(1, 1, dtype=torch.int32))
    cache.__dict__.update(
        req_to_token_pool=pool, token_to_kv_pool_allocator=Slots(1 << 20),
        mamba_cache_chunk_size=64, page_size=1, disable=False, enable_kv_cache_events=False,
        enable_mamba_extra_buffer=False, enable_mamba_extra_buffer_lazy=False, kv_event_queue=[],
        device=torch.device("cpu"),
    )  # fmt: skip
    cache.reset()
    return cache


def scheduler_of(cache: Any) -> SimpleNamespace:
    """The Scheduler attributes a Capture of `cache` reads."""
    return SimpleNamespace(
        tree_cache=cache, req_to_token_pool=cache.req_to_token_pool, token_to_kv_pool_allocator=cache.token_to_kv_pool_allocator
    )


def insert(cache: Any, tokens: list[int], slot: int) -> None:
    """Cache `tokens` (KV indices 0..n-1) with mamba slot `slot`, through sglang's insert."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    key = RadixKey(array("q", tokens), None)
    cache.insert(InsertParams(key=key, value=torch.arange(len(tokens)), mamba_value=torch.tensor([slot])))


class GrowingTree:
    """A branching tree grown and changed through sglang's own insert, match and evict."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.keys: list[list[int]] = []

    def insert(self) -> None:
        n = len(self.keys)
        self.keys.append([1000 + n % 12, 2000 + n % 12, 3000 + n % 3, 4000 + n, 5000 + n])  # branches, splits
        insert(self.cache, self.keys[-1], slot=n + 1)

    def change(self, step: int) -> None:
        """A step's worth: inserts, a hit, an eviction."""
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        for _ in range(3):
            self.insert()
        self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", self.keys[step % len(self.keys)]), None)))
        self.cache.evict_mamba(1)
