"""The MambaRadixCache generation (sglang 0.5.12-0.5.15): its hook table binds to bodies, a
request's flat fields read as 0.5.23's `req.kv`, the `mamba-lru` check (#12007) on records, and
on sglang's real MambaRadixCache class that check and every-step captures of a tree of many nodes
(those parts run in a release venv that has the class: `.venv-sglang-0.5.15/bin/python -m pytest
tests/unit/test_mrc_generation.py`, which CI runs through tests/integration/test_releases.py)."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()

from array import array  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from marked_churn import RESET_STEP, check_marked_churn  # noqa: E402

from mcinspect.checks import StepView, check_step  # noqa: E402
from mcinspect.schema import Counters, NodeId, Seq, Step, apply_delta  # noqa: E402
from mcinspect_engine_hooks.capture import Capture  # noqa: E402
from mcinspect_engine_hooks.catch_up import CATCH_UP_BUDGET_S, IMMEDIATE_NODES  # noqa: E402
from mcinspect_engine_hooks.events import EventSink, hook_points  # noqa: E402
from mcinspect_engine_hooks.generations import GENERATIONS, MAMBA_RADIX_CACHE, resolve, select  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_mrc import HOOKS  # noqa: E402
from mcinspect_engine_hooks.req_kv import (  # noqa: E402
    FlatKv,
    decode_track_entries,
    decode_track_mask,
    fields_of,
    key_tokens,
    kv_of,
    node_id_of,
    prefix_len_of,
)
from mcinspect_engine_hooks.state_log import StateLog  # noqa: E402
from mcinspect_engine_hooks.tree_walk import walked_arena  # noqa: E402

import factory  # noqa: E402
import mrc_cache  # noqa: E402


def test_every_row_binds_to_a_body_and_the_generation_comes_after_0_5_23s() -> None:
    points = hook_points(EventSink(), ErrorCounter(), StateLog(), HOOKS)
    bound = [h for h in HOOKS if h.kind != "scheduler"]
    assert [target for target, _, _ in points] == ["sglang.srt." + h.target for h in bound]
    assert GENERATIONS[-1] is MAMBA_RADIX_CACHE  # 0.5.23's generation is tried first
    assert "mem_cache.mamba_radix_cache.MambaRadixCache.insert" in MAMBA_RADIX_CACHE.required


def _flat_req(**fields: Any) -> SimpleNamespace:
    base = dict(
        rid="r", req_pool_idx=3, mamba_pool_idx=torch.tensor(5), mamba_ping_pong_track_buffer=torch.tensor([7, 8]),
        mamba_next_track_idx=0, mamba_last_track_seqlen=64, mamba_cow_src_index=None, mamba_needs_clear=False,
        prefix_indices=torch.arange(32), last_node=SimpleNamespace(id=12),
    )  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_a_flat_request_reads_as_req_kv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mcinspect_engine_hooks.req_kv._lazy", lambda: False)
    kv = kv_of(_flat_req())
    assert isinstance(kv, FlatKv) and kv.holds_kv and kv.holds_mamba and kv.mamba_prev_track_seqlen is None
    assert kv.mamba_last_track_idx == 1  # the eager swap moved next_track_idx past the tracked entry
    assert kv_of(_flat_req(mamba_ping_pong_track_buffer=None)).mamba_last_track_idx is None
    assert not kv_of(_flat_req(req_pool_idx=None)).holds_kv
    assert not hasattr(kv, "mamba_ping_pong_empty")  # readers derive it from the buffer
    monkeypatch.setattr("mcinspect_engine_hooks.req_kv._lazy", lambda: True)
    assert kv_of(_flat_req()).mamba_last_track_idx == 0  # lazy: the state stays at next_track_idx
    assert node_id_of(_flat_req().last_node) == 12 and node_id_of(4) == 4 and node_id_of(None) == -1
    assert prefix_len_of(_flat_req()) == 32
    info = SimpleNamespace(req_pool_idx=3)  # 0.5.19 on: the ReqKvInfo holds the row
    with_kv = SimpleNamespace(kv=info, prefix_len=9)
    assert kv_of(with_kv) is info and fields_of(with_kv) is info and prefix_len_of(with_kv) == 9


def test_a_request_with_a_slim_kv_reads_its_own_fields() -> None:
    """0.5.17-0.5.18: the Req keeps its row and mamba fields (0.5.18 `mamba_last_track_idx` too),
    its `req.kv` only the KV lengths, and release_kv_cache sets that to None."""
    slim = SimpleNamespace(kv_allocated_len=80, swa_evicted_seqlen=0)
    req = _flat_req(kv=slim, kv_committed_len=70, mamba_last_track_idx=0)
    kv = kv_of(req)
    assert isinstance(kv, FlatKv) and fields_of(req) is req
    assert (kv.req_pool_idx, kv.kv_allocated_len, kv.kv_committed_len) == (3, 80, 70)
    assert kv.mamba_last_track_idx == 0  # the Req's own (derived, the eager swap would say 1)
    released = kv_of(_flat_req(kv=None, req_pool_idx=None, mamba_last_track_idx=None))
    assert released.kv_allocated_len == 0 and not released.holds_kv and released.mamba_last_track_idx is None
    with pytest.raises(AttributeError):
        kv.no_such_field  # noqa: B018 - a name neither the Req nor its kv has is not made up


def test_0_5_17s_decode_track_rows_are_recomputed_once_per_prepared_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.17's decode batch keeps only the device mask: its rows come from sglang's rule
    (seq_lens_cpu % mamba_track_interval), computed once for the three hooks after prepare_for_decode."""
    reads = []
    monkeypatch.setattr("sglang.srt.server_args.get_global_server_args", lambda: reads.append(1) or SimpleNamespace(mamba_track_interval=4))
    reqs = [_flat_req(kv=SimpleNamespace(kv_allocated_len=8, swa_evicted_seqlen=0), mamba_next_track_idx=n) for n in (1, 0, None)]
    batch = SimpleNamespace(reqs=reqs, mamba_track_mask=torch.tensor([True, False, False]), seq_lens_cpu=torch.tensor([8, 9, 12]))
    for _ in range(3):
        assert decode_track_mask(batch) == [True, False, True] and decode_track_entries(batch) == [1, 0, 0]
    assert len(reads) == 1
    batch.seq_lens_cpu = batch.seq_lens_cpu + 1  # the next prepare_for_decode: a new tensor
    assert decode_track_mask(batch) == [False, False, False] and len(reads) == 2
    batch.seq_lens_cpu += 2  # changed in place: its version says so
    assert decode_track_mask(batch) == [False, True, False] and len(reads) == 3
    assert decode_track_mask(SimpleNamespace(mamba_track_mask=None)) is None  # no decode track this step
    newer = SimpleNamespace(mamba_track_mask_cpu=[False, True], mamba_track_buffer_indices=[0, 1])  # 0.5.18 on: sglang's own
    assert decode_track_mask(newer) == [False, True] and decode_track_entries(newer) == [0, 1] and len(reads) == 3


def test_a_key_reads_its_tokens_with_or_without_raw_token_ids() -> None:
    capped = SimpleNamespace(token_ids=array("q", [1, 2, 3]), raw_token_ids=lambda: array("q", [1, 2]))  # 0.5.14 on
    assert list(key_tokens(capped)) == [1, 2]
    assert list(key_tokens(SimpleNamespace(token_ids=array("q", [1, 2, 3])))) == [1, 2, 3]  # 0.5.13's RadixKey


def test_every_row_or_its_fallback_exists_in_the_installed_mamba_radix_cache_release() -> None:
    """In a release venv of 0.5.13-0.5.15: nothing skipped (0.5.13-0.5.14 run the copy-on-write in
    the mamba attention backend: the cow.copy row's fallback). 0.5.12: the four rows of admission
    groups and the deferred copy-on-write, which it does not have."""
    _served_mamba_radix_cache()
    import importlib.metadata

    selection = resolve(MAMBA_RADIX_CACHE)
    expected = OLDEST_SKIPPED if importlib.metadata.version("sglang") in OLDEST_RELEASES else set()
    assert {h.target for h in selection.skipped} == expected, selection.skipped_line()
    chosen = select()  # the same hooks, the unified generation passed over
    assert (chosen.generation, chosen.hooks, chosen.skipped) == (selection.generation, selection.hooks, selection.skipped)


def _served_mamba_radix_cache() -> Any:
    """sglang's MambaRadixCache module where the installed release is read as that generation, found
    by feature as the engine finds it (generations.select); skipped elsewhere: 0.5.16 on still ship
    the class, changed, but their scheduler builds a UnifiedRadixCache."""
    mrc = pytest.importorskip("sglang.srt.mem_cache.mamba_radix_cache", reason="MambaRadixCache: sglang <= 0.5.15")
    generation = getattr(select(), "generation", None)  # None: Unsupported
    if generation is not MAMBA_RADIX_CACHE:
        pytest.skip(f"this sglang is read as {getattr(generation, 'name', 'no generation')}, not {MAMBA_RADIX_CACHE.name}")
    return mrc


OLDEST_RELEASES = ("0.5.11", "0.5.12")
"""Without admission groups and the deferred copy-on-write."""
OLDEST_SKIPPED = {
    "mem_cache.allocator.mamba.MambaSlotAllocator.alloc_group_begin",
    "mem_cache.allocator.mamba.MambaSlotAllocator.alloc_group_end",
    "model_executor.model_runner.ModelRunner._maybe_execute_deferred_mamba_cow_and_clear",
    "managers.schedule_batch.ScheduleBatch._collect_deferred_mamba_cow_and_clear",
}


def _lru_chain(*, swapped: bool) -> list[Any]:
    """Root 0 with three leaves holding slots; the mamba LRU list is 3 -> 2 -> 1 (newest first),
    accessed at 3.0, 2.0, 1.0; `swapped` lists node 1 before node 2 without a new access."""
    times = {1: 1.0, 2: 2.0, 3: 3.0}
    order = [3, 1, 2] if swapped else [3, 2, 1]
    older = {n: order[i + 1] if i + 1 < len(order) else -1 for i, n in enumerate(order)}
    nodes = [factory.node(0, key_len=0, full_lock=1)]
    for n in (1, 2, 3):
        nodes.append(factory.node(n, parent=0, slot=n, last_access=times[n], mamba_lru_older=NodeId(older[n])))
    return nodes


def test_the_mamba_lru_check_flags_a_list_out_of_access_order() -> None:
    assert check_step(StepView.first(factory.state(nodes=_lru_chain(swapped=False))), ["mamba-lru"]) == []
    found = check_step(StepView.first(factory.state(nodes=_lru_chain(swapped=True))), ["mamba-lru"])
    assert [(v.nodes, v.slots) for v in found] == [((1, 2), (1, 2))]
    assert "eviction takes node 1's slot first though node 2's is older" in found[0].reason
    broken = [*_lru_chain(swapped=False)[:3], factory.node(3, parent=0, slot=3, last_access=3.0, mamba_lru_older=NodeId(9))]
    assert "which is not in the tree" in check_step(StepView.first(factory.state(nodes=broken)), ["mamba-lru"])[0].reason


def test_0_5_23_records_leave_the_check_silent() -> None:
    nodes = [factory.node(0, key_len=0), factory.node(1, parent=0, slot=1, last_access=5.0), factory.node(2, parent=0, slot=2)]
    assert check_step(StepView.first(factory.state(nodes=nodes)), ["mamba-lru"]) == []


# --- sglang's real MambaRadixCache (release venvs of 0.5.12-0.5.15) ---


def _real_cache() -> Any:
    _served_mamba_radix_cache()
    return mrc_cache.build_cache()


def _records_check(cache: Any) -> list[Any]:
    from mcinspect_engine_hooks.adapter_mrc import tree_view

    view = tree_view(cache)
    records = view.all_records(set())
    return check_step(StepView.first(factory.state(nodes=list(records.values()))), ["mamba-lru"])


def test_the_real_mamba_radix_cache_keeps_its_lru_in_order_and_the_check_sees_it_broken() -> None:
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    cache = _real_cache()
    mrc_cache.insert(cache, [1, 2, 3, 4], 11)
    mrc_cache.insert(cache, [1, 2, 3, 4, 5, 6], 12)  # a child of the first
    mrc_cache.insert(cache, [1, 2, 9, 9], 13)  # splits the first at 2 (a split parent holds no state)
    cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", [1, 2, 3, 4, 7]), None)))
    assert _records_check(cache) == []
    cache.evict_mamba(1)  # the least recently used state goes: the list stays in order
    assert _records_check(cache) == []
    lru = cache.mamba_lru_list
    oldest = lru.tail.mamba_prev
    lru.reset_node_mru(oldest)  # moved to the front without an access: #12007's disagreement
    found = _records_check(cache)
    assert len(found) == 1 and found[0].nodes[0] == oldest.id, found


def test_every_step_of_a_real_mamba_radix_cache_tree_of_many_nodes_is_captured() -> None:
    """Its tree is walked afresh at each capture (no arena, no marks): a capture that has to read
    more than IMMEDIATE_NODES nodes is not spread over steps (spread, it began again at every
    step: a 1049-node tree published none of 30 steps), and each step's delta leads to what a
    full read sees."""
    tree = mrc_cache.GrowingTree(_real_cache())
    scheduler = mrc_cache.scheduler_of(tree.cache)
    capture = Capture(scheduler, EventSink(), MAMBA_RADIX_CACHE, budget_s=CATCH_UP_BUDGET_S)
    published = capture.full_state(Step(0))
    for _ in range(2 * IMMEDIATE_NODES):
        tree.insert()
    assert len(capture._view.arena()) > 2 * IMMEDIATE_NODES
    for n in range(1, 6):
        parts = capture.step(Step(n))
        assert parts is not None and not capture.catching_up
        apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
        assert published == Capture(scheduler, EventSink(), MAMBA_RADIX_CACHE).full_state(Step(n))
        tree.change(n)


@contextmanager
def _hooked_capture(scheduler: Any) -> Iterator[Capture]:
    """A Capture of the real cache with the release's whole hook table bound (its dirty-mark
    rows too), as the plugin binds it; the original methods restored after."""
    from cpu_cache import install_hooks

    sink = EventSink()
    restore = install_hooks(hook_points(sink, ErrorCounter(), StateLog(), select().hooks))
    try:
        assert sink.node_map_hooked
        yield Capture(scheduler, sink, MAMBA_RADIX_CACHE, budget_s=CATCH_UP_BUDGET_S)
    finally:
        restore()


@contextmanager
def _marked_capture(scheduler: Any) -> Iterator[Capture]:
    """`_hooked_capture` of the class itself: its view reads the marks."""
    with _hooked_capture(scheduler) as capture:
        assert not capture._view.walked
        yield capture


def _full_walk(scheduler: Any, step: int) -> Any:
    """What a Capture with no hooks reads: the whole tree, walked."""
    return Capture(scheduler, EventSink(), MAMBA_RADIX_CACHE).full_state(Step(step))


def _equals_a_full_walk(published: Any, capture: Capture, step: int) -> bool:
    parts = capture.step(Step(step))
    assert parts is not None
    apply_delta(published, parts.to_delta(seq=Seq(step), step=Step(step), events=[], counters=Counters()))
    return published == _full_walk(capture.scheduler, step)


def test_a_leaf_evicted_under_a_node_with_a_state_leaves_that_node_an_evictable_leaf() -> None:
    """The parent of a deleted leaf is marked: nothing else moves it (it keeps its state, so it
    is not deleted after its child, nor moved in either LRU list)."""
    cache = _real_cache()
    mrc_cache.insert(cache, [1, 2], 11)
    mrc_cache.insert(cache, [1, 2, 3], 12)  # a child of the first: root -> [1, 2] -> [3]
    with _marked_capture(mrc_cache.scheduler_of(cache)) as capture:
        published = capture.full_state(Step(0))
        parent = next(r for r in published.nodes.values() if r.key_len == 2)
        assert not parent.evictable
        cache.evict_full(1)  # the one leaf goes
        assert _equals_a_full_walk(published, capture, 1)
        assert published.nodes[parent.id].evictable and len(published.nodes) == 2


def test_with_the_dirty_mark_hooks_a_capture_reads_only_the_nodes_that_changed() -> None:
    """mrc_marks' hooks bound to the real class (with the rest of the release's table): a tree
    grown unwatched is caught up over steps, then each step's delta leads to what a full walk
    reads, through inserts, splits, hits, lock moves, mamba and full evictions (tombstones,
    deleted leaves) and a `reset()`, while a step reads a few dozen of its 500+ nodes."""
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey

    tree = mrc_cache.GrowingTree(_real_cache())
    cache = tree.cache
    scheduler = mrc_cache.scheduler_of(cache)
    with _marked_capture(scheduler) as capture:
        locked: list[Any] = []

        def churn(n: int) -> None:
            tree.change(n)  # 3 inserts (new leaves and splits), a hit, a mamba eviction
            hit = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tree.keys[(7 * n) % len(tree.keys)]), None)))
            if n % 3 == 0:
                cache.inc_lock_ref(hit.last_device_node)
                locked.append(hit.last_device_node)
            if n % 4 == 0 and locked:
                cache.dec_lock_ref(locked.pop(0))
            if n % 5 == 0:
                cache.evict_full(12)  # leaves, then the tombstones they leave childless
            if n == RESET_STEP:
                cache.reset()
                locked.clear()

        check_marked_churn(
            capture, tree.insert, churn, lambda step: _full_walk(scheduler, step), lambda: len(walked_arena(cache.root_node))
        )
        assert set(capture.sink.node_map) == set(walked_arena(cache.root_node))


def test_the_self_check_compares_a_marked_capture_with_the_real_tree_walked() -> None:
    """`--self-check` on a MambaRadixCache release: clean through real changes; a node cut out
    of the tree behind the hooks' back (no sglang method ran) is a failure at the next step."""
    from mcinspect_engine_hooks.self_check import SelfCheck

    tree = mrc_cache.GrowingTree(_real_cache())
    scheduler = mrc_cache.scheduler_of(tree.cache)
    with _marked_capture(scheduler) as capture:
        capture.full_state(Step(0))
        check = SelfCheck()
        for n in range(1, 6):
            tree.change(n)
            assert capture.step(Step(n)) is not None
            check.after_step(capture, scheduler, Step(n))
        assert check.steps == 5 and check.failures == 0, check.first_failure
        leaf = next(node for node in walked_arena(tree.cache.root_node).values() if node.parent is not None and not node.children)
        leaf.parent.children.pop(next(k for k, v in leaf.parent.children.items() if v is leaf))
        assert capture.step(Step(6)) is not None
        check.after_step(capture, scheduler, Step(6))
        assert check.failures == 1 and "nodes differ from a full read" in check.first_failure, check.first_failure


def test_a_subclass_of_the_cache_is_walked_its_own_methods_are_not_marked() -> None:
    """HiMambaRadixCache deletes and moves nodes in methods of its own (its host tier)."""
    cache = _real_cache()  # skips where sglang has no MambaRadixCache
    cache.__class__ = type("HiMambaRadixCache", (type(cache),), {})
    with _hooked_capture(mrc_cache.scheduler_of(cache)) as capture:
        assert capture._view.walked
        published = capture.full_state(Step(0))
        mrc_cache.insert(cache, [1, 2, 3], 11)
        assert _equals_a_full_walk(published, capture, 1) and capture.sink.node_map is None
