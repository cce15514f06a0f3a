"""sglang 0.5.16's real UnifiedRadixCache (FULL + MAMBA, no_buffer, page 1; it keeps its nodes
itself) over its real CPU pools, with a scheduler stand-in holding what a Capture reads, and a
tree grown and changed through the cache's own methods. Needs a release venv of 0.5.16 and the
CPU patches (`cpu_engine.patches.install()`) before sglang is first imported."""

from __future__ import annotations

from array import array
from types import SimpleNamespace
from typing import Any

import torch


def build_cache(mamba_slots: int = 8, kv_tokens: int = 256) -> Any:
    """sglang 0.5.16's UnifiedRadixCache (FULL + MAMBA, no_buffer, page 1) over CPU pools."""
    from sglang.kernels.ops.attention.fla.chunk_delta_h import CHUNK_SIZE
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache_components import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    server_args = ServerArgs(model_path="dummy", page_size=1)
    server_args._mamba_cache_chunk_size = CHUNK_SIZE  # no HF config to read
    set_global_server_args_for_scheduler(server_args)
    with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
        shape = Mamba2StateShape.create(
            tp_world_size=1, intermediate_size=16, n_groups=1, num_heads=1, head_dim=4, state_size=4, conv_kernel=4
        )
    pool = HybridReqToTokenPool(
        size=4, mamba_size=mamba_slots, mamba_spec_state_size=4, max_context_len=64, device="cpu", enable_memory_saver=False,
        cache_params=Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0], enable_mamba_extra_buffer=False,
    )  # fmt: skip
    kv_pool = HybridLinearKVPool(
        size=kv_tokens, dtype=torch.bfloat16, page_size=1, head_num=1, head_dim=8, full_attention_layer_ids=[1],
        device="cpu", enable_memory_saver=False, mamba_pool=pool.mamba_pool,
    )  # fmt: skip
    allocator = TokenToKVPoolAllocator(kv_tokens, torch.bfloat16, "cpu", kv_pool, need_sort=False)
    params = CacheInitParams(
        req_to_token_pool=pool, token_to_kv_pool_allocator=allocator, page_size=1, disable=False,
        tree_components=(ComponentType.FULL, ComponentType.MAMBA), enable_mamba_extra_buffer=False,
    )  # fmt: skip
    return UnifiedRadixCache(params=params)


def cache_state(cache: Any, rid: str, tokens: list[int]) -> int:
    """A chunk checkpoint's insert and cleanup as cache_unfinished_req runs them: the state of a
    fresh mamba slot cached under `tokens`; returns the slot."""
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.srt.mem_cache.unified_cache_components import ComponentType

    slot = cache.req_to_token_pool.mamba_allocator.alloc(1)
    kv = cache.token_to_kv_pool_allocator.alloc(len(tokens))
    params = InsertParams(key=RadixKey(array("q", tokens), None), value=kv, mamba_value=slot)
    result = cache.insert(params)
    req = SimpleNamespace(rid=rid, mamba_last_track_seqlen=len(tokens))
    cache.components[ComponentType.MAMBA].cleanup_after_caching_req(req, False, insert_result=result, insert_params=params)
    return int(slot)


def scheduler_of(cache: Any) -> SimpleNamespace:
    """The Scheduler attributes a Capture of `cache` reads."""
    return SimpleNamespace(
        tree_cache=cache, req_to_token_pool=cache.req_to_token_pool, token_to_kv_pool_allocator=cache.token_to_kv_pool_allocator
    )


class GrowingTree:
    """A branching tree grown and changed through 0.5.16's own insert, match, lock and evict:
    new leaves, splits, states on inner nodes (a key extended), tombstones and deleted leaves."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.keys: list[list[int]] = []

    def insert(self, tokens: list[int] | None = None) -> None:
        n = len(self.keys)
        if tokens is None:
            tokens = [1000 + n % 12, 2000 + n % 12, 3000 + n % 3, 4000 + n, 5000 + n]  # branches, splits
        self.keys.append(tokens)
        cache_state(self.cache, f"r{n}", tokens)

    def match(self, n: int) -> Any:
        from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixKey

        key = RadixKey(array("q", self.keys[(7 * n) % len(self.keys)]), None)
        return self.cache.match_prefix(MatchPrefixParams(key=key))

    def change(self, n: int) -> None:
        """A step's worth: inserts (one extending a cached key: its node gets a child), a hit,
        a mamba eviction (a tombstone or a deleted leaf)."""
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams

        for _ in range(2):
            self.insert()
        self.insert(self.keys[(5 * n) % len(self.keys)] + [6000 + n])
        self.match(n)
        self.cache.evict(EvictParams(num_tokens=0, mamba_num=1))
