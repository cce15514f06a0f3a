"""The unified-tree-0516 generation (sglang 0.5.16's UnifiedRadixCache, which keeps its nodes
itself): its table binds to bodies, feature detection tells it from 0.5.15 (the same cache
class, a MambaRadixCache built), and, in a release venv of 0.5.16, its hooks and tree view on
sglang's real cache classes (`.venv-sglang-0.5.16/bin/python -m pytest tests/unit/test_0516_generation.py`)."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()

from array import array  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from mcinspect.schema import EvictEvent, InsertEvent, NodeId, Step  # noqa: E402
from mcinspect_engine_hooks import generations  # noqa: E402
from mcinspect_engine_hooks.events import EventSink, hook_points  # noqa: E402
from mcinspect_engine_hooks.generations import (  # noqa: E402
    GENERATIONS,
    MAMBA_RADIX_CACHE,
    UNIFIED_TREE_0516,
    UNIFIED_TREE_CORE,
    Selection,
    resolve,
    select,
)
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_0516 import HOOKS  # noqa: E402
from mcinspect_engine_hooks.state_log import StateLog  # noqa: E402

from cpu_cache import install_hooks  # noqa: E402

NOT_IN_0516 = ["layers.attention.hybrid_linear_attn_backend.track_mamba_states_all_layers"]


def test_every_row_binds_to_a_body_and_the_generation_sits_between_the_others() -> None:
    points = hook_points(EventSink(), ErrorCounter(), StateLog(), HOOKS)
    assert [target for target, _, _ in points] == ["sglang.srt." + h.target for h in HOOKS if h.kind != "scheduler"]
    assert GENERATIONS == (UNIFIED_TREE_CORE, UNIFIED_TREE_0516, MAMBA_RADIX_CACHE)
    commit = "mem_cache.unified_cache_components.mamba_component.MambaComponent.commit_insert_component_data"
    assert commit in UNIFIED_TREE_0516.required


def _as_release(monkeypatch: pytest.MonkeyPatch, *, int8_pool: bool) -> None:
    """Every target exists but 0.5.17's (`unified_cache.`): 0.5.15 (`int8_pool` False) or 0.5.16."""

    def resolves(target: str) -> bool:
        return not target.startswith("mem_cache.unified_cache.") and (int8_pool or not target.endswith(".int8_ckpt_pool"))

    monkeypatch.setattr(generations, "resolves", resolves)


def test_the_int8_checkpoint_pool_tells_0_5_16_from_0_5_15(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.15 ships 0.5.16's UnifiedRadixCache too but builds a MambaRadixCache for hybrid models."""
    _as_release(monkeypatch, int8_pool=True)
    chosen = select()
    assert isinstance(chosen, Selection) and chosen.generation is UNIFIED_TREE_0516
    _as_release(monkeypatch, int8_pool=False)
    chosen = select()
    assert isinstance(chosen, Selection) and chosen.generation is MAMBA_RADIX_CACHE
    assert "int8_ckpt_pool" in chosen.passed_over[1]


# --- sglang 0.5.16's real UnifiedRadixCache (its release venv) ---


@pytest.fixture
def release_0516() -> None:
    pytest.importorskip("sglang.srt.mem_cache.unified_cache_components", reason="sglang 0.5.15-0.5.16")
    chosen = select()
    if not (isinstance(chosen, Selection) and chosen.generation is UNIFIED_TREE_0516):
        pytest.skip("the installed sglang selects another generation")


def test_only_the_all_layers_track_copy_is_missing(release_0516: None) -> None:
    selection = resolve(UNIFIED_TREE_0516)
    assert [h.target for h in selection.skipped] == NOT_IN_0516, selection.skipped_line()


def _cache() -> Any:
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
        size=4, mamba_size=8, mamba_spec_state_size=4, max_context_len=64, device="cpu", enable_memory_saver=False,
        cache_params=Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0], enable_mamba_extra_buffer=False,
    )  # fmt: skip
    kv_pool = HybridLinearKVPool(
        size=256, dtype=torch.bfloat16, page_size=1, head_num=1, head_dim=8, full_attention_layer_ids=[1],
        device="cpu", enable_memory_saver=False, mamba_pool=pool.mamba_pool,
    )  # fmt: skip
    allocator = TokenToKVPoolAllocator(256, torch.bfloat16, "cpu", kv_pool, need_sort=False)
    params = CacheInitParams(
        req_to_token_pool=pool, token_to_kv_pool_allocator=allocator, page_size=1, disable=False,
        tree_components=(ComponentType.FULL, ComponentType.MAMBA), enable_mamba_extra_buffer=False,
    )  # fmt: skip
    return UnifiedRadixCache(params=params)


@pytest.fixture
def hooked(release_0516: None) -> Iterator[tuple[Any, EventSink, StateLog, ErrorCounter]]:
    """0.5.16's cache with the generation's hooks applied through sglang's HookRegistry."""
    sink, log, errors = EventSink(), StateLog(), ErrorCounter()
    restore = install_hooks(hook_points(sink, errors, log, resolve(UNIFIED_TREE_0516).hooks))
    try:
        yield _cache(), sink, log, errors
    finally:
        restore()


def _cache_state(cache: Any, rid: str, tokens: list[int]) -> int:
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


def test_the_view_reads_the_real_cache_and_the_hooks_see_its_inserts_and_evictions(hooked: Any) -> None:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    from mcinspect_engine_hooks.adapter_0516 import refusal, tree_view

    cache, sink, log, errors = hooked
    assert refusal(cache) == ""
    a = _cache_state(cache, "a", [1, 2, 3, 4, 5, 6, 7, 8])
    b = _cache_state(cache, "b", [1, 2, 3, 4, 9, 9])  # splits a's node at 4: the parent holds no state
    c = _cache_state(cache, "c", [1, 2, 3, 4, 5, 6, 7, 8, 10, 11])  # a child of a's node
    view = tree_view(cache)
    records = view.all_records(sink.tombstones)
    by_slot = {r.mamba_slot: r for r in records.values() if r.mamba_slot >= 0}
    assert sorted(by_slot) == sorted([a, b, c]) and len(records) == 5
    node_a, node_b, node_c = (by_slot[s] for s in (a, b, c))
    assert records[node_a.parent].mamba_slot == -1 and records[node_a.parent].depth == 0
    assert (node_a.depth, node_a.key_len, node_c.parent, node_c.depth) == (4, 4, node_a.id, 8)
    assert node_b.evictable and node_c.evictable and not node_a.evictable and node_a.in_mamba_lru
    assert view.path_tokens(node_c.id) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11] and view.slot_of(node_b.id) == b
    inserts = [e for e in sink.drain(Step(1)) if isinstance(e, InsertEvent)]
    assert [(e.rid, e.node, e.slot, e.seqlen, e.ping_pong_index) for e in inserts] == [
        ("a", node_a.id, a, 8, -1), ("b", node_b.id, b, 6, -1), ("c", node_c.id, c, 10, -1),
    ]  # fmt: skip
    assert [(s.slot, s.node, s.rid) for s in log.drain(Step(1))] == [(a, node_a.id, "a"), (b, node_b.id, "b"), (c, node_c.id, "c")]

    cache.evict(EvictParams(num_tokens=0, mamba_num=1))  # the oldest state: a's, on an inner node
    evictions = [e for e in sink.drain(Step(2)) if isinstance(e, EvictEvent)]
    assert [(e.nodes, e.slots, e.tokens) for e in evictions] == [([NodeId(node_a.id)], [a], 0)]
    tombstone = view.all_records(sink.tombstones)[node_a.id]
    assert tombstone.mamba_slot == -1 and tombstone.tombstone and view.slot_of(node_a.id) is None

    cache.evict(EvictParams(num_tokens=0, mamba_num=2))  # the two leaves leave the tree
    evictions = [e for e in sink.drain(Step(3)) if isinstance(e, EvictEvent)]
    assert sorted(evictions[0].slots) == sorted([b, c]) and evictions[0].tokens == 4
    assert {node_b.id, node_c.id} <= set(evictions[0].nodes)
    records = view.all_records(sink.tombstones)
    assert node_b.id not in records and node_c.id not in records and records[node_a.id].tombstone
    assert view.slot_of(node_b.id) is None and view.path_tokens(node_c.id) is None
    assert view.path_tokens(node_a.id) == [1, 2, 3, 4, 5, 6, 7, 8] and sink.evicted_slots == 3
    assert errors.total == 0, errors.by_hook
