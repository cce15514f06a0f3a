"""The unified-tree-0516 generation (sglang 0.5.16's UnifiedRadixCache, which keeps its nodes
itself): its table binds to bodies, feature detection tells it from 0.5.15 (the same cache
class, a MambaRadixCache built), and, in a release venv of 0.5.16, its hooks, tree view and
dirty marks on sglang's real cache classes (`.venv-sglang-0.5.16/bin/python -m pytest
tests/unit/test_0516_generation.py`, which CI runs through tests/integration/test_releases.py)."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()

from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import unified_0516_cache  # noqa: E402
from marked_churn import RESET_STEP, check_marked_churn  # noqa: E402

from mcinspect.schema import EvictEvent, InsertEvent, NodeId, Step  # noqa: E402
from mcinspect_engine_hooks import generations  # noqa: E402
from mcinspect_engine_hooks.capture import Capture  # noqa: E402
from mcinspect_engine_hooks.catch_up import CATCH_UP_BUDGET_S  # noqa: E402
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
from mcinspect_engine_hooks.tree_walk import walked_arena  # noqa: E402

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


@pytest.fixture
def hooked(release_0516: None) -> Iterator[tuple[Any, EventSink, StateLog, ErrorCounter]]:
    """0.5.16's cache with the generation's hooks applied through sglang's HookRegistry."""
    sink, log, errors = EventSink(), StateLog(), ErrorCounter()
    restore = install_hooks(hook_points(sink, errors, log, resolve(UNIFIED_TREE_0516).hooks))
    try:
        yield unified_0516_cache.build_cache(), sink, log, errors
    finally:
        restore()


def test_the_view_reads_the_real_cache_and_the_hooks_see_its_inserts_and_evictions(hooked: Any) -> None:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    from mcinspect_engine_hooks.adapter_0516 import refusal, tree_view

    cache, sink, log, errors = hooked
    assert refusal(cache) == ""
    a = unified_0516_cache.cache_state(cache, "a", [1, 2, 3, 4, 5, 6, 7, 8])
    b = unified_0516_cache.cache_state(cache, "b", [1, 2, 3, 4, 9, 9])  # splits a's node at 4: the parent holds no state
    c = unified_0516_cache.cache_state(cache, "c", [1, 2, 3, 4, 5, 6, 7, 8, 10, 11])  # a child of a's node
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


@contextmanager
def _marked_capture(cache: Any) -> Iterator[Capture]:
    """A Capture of the real cache with the release's whole hook table bound through sglang's
    HookRegistry, as the plugin binds it; its view reads the marks."""
    sink = EventSink()
    restore = install_hooks(hook_points(sink, ErrorCounter(), StateLog(), resolve(UNIFIED_TREE_0516).hooks))
    try:
        capture = Capture(unified_0516_cache.scheduler_of(cache), sink, UNIFIED_TREE_0516, budget_s=CATCH_UP_BUDGET_S)
        assert sink.node_map_hooked and not capture._view.walked
        yield capture
    finally:
        restore()


def _full_walk(cache: Any, step: int, hooked: EventSink) -> Any:
    """What a Capture with no hooks reads: the whole tree, walked (with the tombstones the
    hooks saw made: sglang keeps no such mark)."""
    sink = EventSink()
    sink.tombstones = set(hooked.tombstones)
    capture = Capture(unified_0516_cache.scheduler_of(cache), sink, UNIFIED_TREE_0516)
    assert capture._view.walked
    return capture.full_state(Step(step))


def test_with_the_dirty_mark_hooks_a_capture_reads_only_the_nodes_that_changed(release_0516: None) -> None:
    """marks_0516's and the tree rows bound to 0.5.16's real cache (with the rest of its table):
    a tree grown unwatched is caught up over steps, then each step's delta leads to what a full
    walk reads, through inserts, splits, states on inner nodes, hits, lock moves (a path locked
    twice, without a match of it in that step), mamba and full evictions (tombstones, deleted leaves and tombstone chains) and a `reset()`, while a step
    reads a few dozen of its 500+ nodes."""
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    tree = unified_0516_cache.GrowingTree(unified_0516_cache.build_cache(mamba_slots=2048, kv_tokens=1 << 14))
    cache = tree.cache
    with _marked_capture(cache) as capture:
        locked: list[Any] = []

        def churn(n: int) -> None:
            tree.change(n)
            if n % 3 == 0:
                node = tree.match(n).last_device_node
                cache.inc_lock_ref(node)
                locked.append(node)
            if n % 3 == 1 and locked:  # a second lock on a path no match of this step stamped
                cache.inc_lock_ref(locked[-1])
                locked.append(locked[-1])
            if n % 4 == 0 and locked:  # a path's lock refs 2 -> 1 or 1 -> 0
                cache.dec_lock_ref(locked.pop(0))
            if n % 5 == 0:
                cache.evict(EvictParams(num_tokens=12, mamba_num=0))  # leaves, then the chains they leave childless
            if n == RESET_STEP:
                cache.reset()
                locked.clear()

        tombstones = check_marked_churn(
            capture, tree.insert, churn, lambda step: _full_walk(cache, step, capture.sink), lambda: len(walked_arena(cache.root_node))
        )
        assert set(capture.sink.node_map) == set(walked_arena(cache.root_node))
        assert tombstones > 0


def test_a_cache_with_a_host_tier_or_of_a_subclass_is_walked(release_0516: None) -> None:
    """The marks follow the class itself with FULL and MAMBA on the device: HiCache's host
    insert creates nodes in a method of its own (`_insert_helper_host`), which they do not
    hook, as a subclass's own methods may."""
    host_tier = unified_0516_cache.build_cache()
    host_tier.cache_controller = SimpleNamespace()  # what a host tier sets
    subclassed = unified_0516_cache.build_cache()
    subclassed.__class__ = type("Subclassed", (type(subclassed),), {})
    sink = EventSink()
    restore = install_hooks(hook_points(sink, ErrorCounter(), StateLog(), resolve(UNIFIED_TREE_0516).hooks))
    try:
        assert sink.node_map_hooked
        assert not Capture(unified_0516_cache.scheduler_of(unified_0516_cache.build_cache()), sink, UNIFIED_TREE_0516)._view.walked
        for cache in (host_tier, subclassed):
            assert Capture(unified_0516_cache.scheduler_of(cache), sink, UNIFIED_TREE_0516)._view.walked
    finally:
        restore()
