"""sglang 0.5.23's real UnifiedRadixCache (FULL + MAMBA) over CPU pools, with a
stand-in for the few Scheduler attributes Capture reads. What the capture tests and the
capture benchmark run against; the embedded engine builds its cache through sglang itself.

Needs the CPU patches (`cpu_engine.patches.install()`) before sglang is first imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

MAMBA_LAYERS = [0]
"""Layer 0 is linear attention, layer 1 full attention (as in the embedded tiny model)."""


def build_cache(
    *,
    core: str = "python",
    page_size: int = 1,
    mamba_slots: int = 40,
    kv_size: int = 1024,
    max_requests: int = 8,
    max_context_len: int = 256,
    extra_buffer: bool = True,
    python_core_class: Callable[..., Any] | None = None,
) -> SimpleNamespace:
    """A scheduler stand-in (tree_cache, req_to_token_pool, token_to_kv_pool_allocator,
    running_batch.reqs, waiting_queue, chunked_req) over freshly built sglang objects.

    `core`: sglang's tree core backend ("python" or "rust"); `extra_buffer`: the mamba
    ping-pong buffer (False is no_buffer, which sglang allows only with page_size 1);
    `python_core_class` replaces sglang's UnifiedTreeCore class for "python" (e.g. its test
    kit's inspector subclass); `max_context_len`: the tokens a req_to_token row holds.
    """
    import torch
    from sglang.kernels.ops.attention.fla.chunk_delta_h import CHUNK_SIZE as FLA_CHUNK_SIZE
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_cache.tree_core_registry import _TREE_CORE_REGISTRY
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    server_args = ServerArgs(model_path="dummy", page_size=page_size)
    server_args._mamba_cache_chunk_size = max(FLA_CHUNK_SIZE, page_size)  # no HF config to read
    set_global_server_args_for_scheduler(server_args)
    with envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
        shape = Mamba2StateShape.create(
            tp_world_size=1, intermediate_size=16, n_groups=1, num_heads=1, head_dim=4, state_size=4, conv_kernel=4
        )
        cache_params = Mamba2CacheParams(shape=shape, layers=MAMBA_LAYERS)
    pool = HybridReqToTokenPool(
        size=max_requests,
        mamba_size=mamba_slots,
        mamba_spec_state_size=max_requests,
        max_context_len=max_context_len,
        device="cpu",
        enable_memory_saver=False,
        cache_params=cache_params,
        mamba_layer_ids=MAMBA_LAYERS,
        enable_mamba_extra_buffer=extra_buffer,
        speculative_num_draft_tokens=3,
    )
    kv_pool = HybridLinearKVPool(
        size=kv_size,
        dtype=torch.bfloat16,
        page_size=page_size,
        head_num=1,
        head_dim=8,
        full_attention_layer_ids=[1],
        device="cpu",
        enable_memory_saver=False,
        mamba_pool=pool.mamba_pool,
    )
    if page_size == 1:
        allocator: Any = TokenToKVPoolAllocator(kv_size, torch.bfloat16, "cpu", kv_pool, need_sort=False)
    else:
        allocator = PagedTokenToKVPoolAllocator(kv_size, page_size, torch.bfloat16, "cpu", kv_pool, need_sort=False)
    params = CacheInitParams(
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        page_size=page_size,
        disable=False,
        tree_components=(ComponentType.FULL, ComponentType.MAMBA),
        enable_mamba_extra_buffer=extra_buffer,
        tree_core_backend=core,
    )
    overrides = {"python": python_core_class} if python_core_class is not None else {}
    with mock.patch.dict(_TREE_CORE_REGISTRY, overrides):
        tree = UnifiedRadixCache(params=params)
    return SimpleNamespace(
        tree_cache=tree,
        req_to_token_pool=pool,
        token_to_kv_pool_allocator=allocator,
        running_batch=SimpleNamespace(reqs=[]),
        waiting_queue=[],
        chunked_req=None,
    )


@contextmanager
def mcinspect_hooks() -> Iterator[tuple[Any, Any]]:
    """mcinspect's whole hook table applied through sglang's HookRegistry: (EventSink,
    ErrorCounter) while inside; the original methods restored after."""
    from mcinspect_engine_hooks.events import EventSink, hook_points
    from mcinspect_engine_hooks.guard import ErrorCounter
    from mcinspect_engine_hooks.hooks_0523 import HOOKS
    from mcinspect_engine_hooks.state_log import StateLog

    sink, errors = EventSink(), ErrorCounter()
    restore = install_hooks(hook_points(sink, errors, StateLog(), HOOKS))
    try:
        yield sink, errors
    finally:
        restore()


def install_hooks(points: list[tuple[str, str, Callable[..., None]]]) -> Callable[[], None]:
    """Apply `points` through sglang's HookRegistry (registry.py's stand-in on a release
    without one), as the plugin does; returns a function that puts the original methods and
    the registry back."""
    import pkgutil

    from mcinspect_engine_hooks.registry import hook_registry

    HookRegistry, HookType = hook_registry()  # noqa: N806 - sglang's class, or its stand-in

    saved_hooks = {target: list(hooks) for target, hooks in HookRegistry._hooks.items()}
    saved_patched = set(HookRegistry._patched)
    originals = []
    for target, when, fn in points:
        owner_path, attr = target.rsplit(".", 1)
        owner = pkgutil.resolve_name(owner_path)
        originals.append((owner, attr, owner.__dict__[attr]))
        HookRegistry.register(target, fn, HookType(when))
    HookRegistry.apply_hooks()

    def restore() -> None:
        for owner, attr, original in reversed(originals):  # the first saved is the original
            setattr(owner, attr, original)
        HookRegistry._hooks.clear()
        HookRegistry._hooks.update(saved_hooks)
        HookRegistry._patched = saved_patched

    return restore
