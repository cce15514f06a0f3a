"""Capture and hooks against sglang 0.5.23's real cache classes on CPU tensors.

The tree, pools and allocators are sglang's own (UnifiedRadixCache with FULL + MAMBA,
HybridReqToTokenPool, MambaSlotAllocator, token / paged KV allocators); requests go through
sglang's own match / checkpoint / release functions. Only the Scheduler is a stand-in: an
object with the attributes Capture reads. The hooks are installed through sglang's
HookRegistry, as the plugin does, and removed afterwards.
"""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

from array import array  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import TypeVar  # noqa: E402

import msgspec  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from cache_driver import Driver  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components.base import ComponentType  # noqa: E402
from sglang.test.kits.unified_radix_cache.unified_tree_core_inspector import UnifiedTreeCoreInspector  # noqa: E402

from mcinspect.schema import (  # noqa: E402
    INLINE_TOKENS,
    CacheState,
    Counters,
    EvictEvent,
    InsertEvent,
    KvEdit,
    LockEvent,
    MatchEvent,
    RequestEvent,
    Seq,
    SlotEvent,
    SlotId,
    Step,
    apply_delta,
    from_runs,
    key_hash,
)
from mcinspect_engine_hooks import growing_runs  # noqa: E402
from mcinspect_engine_hooks.capture import Capture, DeltaParts  # noqa: E402
from mcinspect_engine_hooks.events import EventSink  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.pools_0523 import mamba_allocator  # noqa: E402

import cpu_cache  # noqa: E402  (tests/support: sglang's real cache classes on CPU tensors)

T = TypeVar("T")

FULL, MAMBA = ComponentType.FULL, ComponentType.MAMBA
SLOTS = 40


def build_cache(core: str = "python", page_size: int = 1, extra_buffer: bool = True) -> SimpleNamespace:
    """The Python core is sglang's test-kit inspector subclass, to compare against."""
    return cpu_cache.build_cache(
        core=core,
        page_size=page_size,
        mamba_slots=SLOTS,
        extra_buffer=extra_buffer,
        python_core_class=UnifiedTreeCoreInspector,
    )


@pytest.fixture
def hooks() -> Iterator[tuple[EventSink, ErrorCounter]]:
    with cpu_cache.mcinspect_hooks() as pair:
        yield pair


def fresh_state(scheduler: SimpleNamespace, sink: EventSink, step: int) -> CacheState:
    """A full read by a second Capture (the one under test keeps its own baseline)."""
    return Capture(scheduler, sink).full_state(Step(step))


def assert_partition(state: CacheState, size: int) -> None:
    """A healthy state: slots 1..size, each with exactly one claim."""
    assert set(state.slots) == set(range(1, size + 1))
    bad = {slot: claims for slot, claims in state.slots.items() if len(claims) != 1 or claims[0].kind == "unaccounted"}
    assert not bad


def assert_agrees_with_sglang(state: CacheState, scheduler: SimpleNamespace) -> None:
    """The captured tree, free lists and KV allocator against sglang's own views."""
    tree, pool, allocator = scheduler.tree_cache, scheduler.req_to_token_pool, scheduler.token_to_kv_pool_allocator
    core = tree.tree_core
    ids = core.get_all_node_ids()
    assert set(state.nodes) == set(ids)
    for node_id in ids:
        record = state.nodes[node_id]
        tokens = core.get_node_token_ids(node_id)
        parent = core.get_parent_node_id(node_id)
        assert record.token_ids == tokens[:INLINE_TOKENS]
        assert (record.key_len, record.key_hash) == (len(tokens), key_hash(tokens))
        assert record.parent == (-1 if parent is None else parent)
        if parent is not None:
            above = state.nodes[parent]
            assert record.depth == above.depth + above.key_len
        assert record.full_lock == core.get_component_device_lock_ref(node_id, FULL)
        assert record.mamba_lock == core.get_component_device_lock_ref(node_id, MAMBA)
        assert record.in_mamba_lru == core.is_node_in_device_lru(node_id, MAMBA)
        assert record.evictable == core.is_device_evictable_leaf(node_id)
        assert record.hit_count == core.get_node_hit_count(node_id)
        slot = core.get_component_device_value(node_id, MAMBA)
        assert record.mamba_slot == (-1 if slot is None else int(slot.item()))
        full = core.get_component_device_value(node_id, FULL)
        if parent is not None:
            assert from_runs(record.kv_runs) == ([] if full is None else full.tolist())
    tree_slots = {r.mamba_slot for r in state.nodes.values() if r.mamba_slot >= 0}
    assert tree_slots == set(tree.all_mamba_values_flatten().tolist())
    free = {slot for slot, claims in state.slots.items() if any(c.kind == "free" for c in claims)}
    assert free == set(pool.mamba_allocator.free_slots.tolist())
    free_tokens = set(from_runs(state.kv.free_runs))
    assert len(free_tokens) == allocator.available_size()
    pages = allocator.get_all_free_pages().tolist()
    assert free_tokens == {p * allocator.page_size + i for p in pages for i in range(allocator.page_size)}


def path_tokens(state: CacheState, node_id: int) -> list[int]:
    """The token ids from the root to the end of a node (keys here are shorter than INLINE_TOKENS)."""
    chunks = []
    while node_id in state.nodes:
        chunks.append(state.nodes[node_id].token_ids)
        node_id = state.nodes[node_id].parent
    return [t for chunk in reversed(chunks) for t in chunk]


class Stepper:
    """Applies each step's DeltaParts to the first full state, as a client would."""

    def __init__(self, scheduler: SimpleNamespace, sink: EventSink) -> None:
        self.scheduler, self.sink = scheduler, sink
        self.capture = Capture(scheduler, sink)
        self.state = as_sent(self.capture.full_state(Step(0)))
        self.parts: DeltaParts | None = None
        self.n = 0

    def step(self) -> CacheState:
        """Capture a step, apply its delta as sent, check it equals a fresh full read as sent;
        return it."""
        self.n += 1
        self.parts = self.capture.step(Step(self.n))
        delta = self.parts.to_delta(seq=Seq(self.n), step=Step(self.n), events=[], counters=Counters())
        apply_delta(self.state, as_sent(delta))
        assert self.state == as_sent(fresh_state(self.scheduler, self.sink, self.n))
        return self.state


def as_sent(message: T) -> T:
    """`message` as a client decodes it (the engine's tuples and GrowingRuns are lists there)."""
    return msgspec.msgpack.decode(growing_runs.encoder().encode(message), type=type(message))


@pytest.mark.parametrize("page_size", [1, 4])
def test_clean_state_agrees_with_sglang_and_partitions_slots(hooks: tuple[EventSink, ErrorCounter], page_size: int) -> None:
    sink, errors = hooks
    scheduler = build_cache(page_size=page_size)
    state = Capture(scheduler, sink).full_state(Step(0))
    assert list(state.nodes) == [scheduler.tree_cache.tree_core.root_node.id]
    assert all(claims[0].kind == "free" for claims in state.slots.values())
    assert_partition(state, SLOTS)
    assert_agrees_with_sglang(state, scheduler)
    assert errors.total == 0


@pytest.mark.parametrize("page_size", [1, 4])
def test_deltas_reproduce_full_states(hooks: tuple[EventSink, ErrorCounter], page_size: int) -> None:
    sink, errors = hooks
    scheduler = build_cache(page_size=page_size)
    drive, steps = Driver(scheduler), Stepper(scheduler, sink)
    prompt = list(range(100, 140))

    a = drive.admit(prompt)  # miss; chunked prefill donates a ping-pong slot at 16
    drive.prefill(a, 16)
    state = steps.step()
    assert_partition(state, SLOTS)
    assert state.requests[a.rid].state == "chunked"
    assert any(r.mamba_slot >= 0 and r.depth + r.key_len == 16 for r in state.nodes.values())

    drive.prefill(a, 40)
    drive.decode(a, [1, 2, 3])
    steps.step()
    drive.decode(a, [4])  # decoding alone: the record goes out as its growth
    state = steps.step()
    assert steps.parts is not None and not steps.parts.upsert_requests
    assert [(g.rid, g.output_len, g.allocated_len) for g in steps.parts.grown_requests] == [(a.rid, 4, 44)]
    # Its KV token goes out as an edit of the free runs, not the whole list (page 4: its page came at the step before).
    token = int(scheduler.req_to_token_pool.req_to_token[a.kv.req_pool_idx, 43])
    assert steps.parts.kv is None
    assert steps.parts.kv_edit == (KvEdit(removed=[(token, 1)], added=[]) if page_size == 1 else None)
    drive.finish(a)  # the last tracked state goes to the tree
    state = steps.step()
    assert a.rid not in state.requests
    assert_partition(state, SLOTS)
    assert_agrees_with_sglang(state, scheduler)

    b = drive.admit(prompt[:24] + list(range(300, 320)))  # hit at 16 with COW, splits [16, 40)
    assert b.prefix_len == 16
    state = steps.step()
    assert state.requests[b.rid].cow_source >= 0
    cow = [c for claims in state.slots.values() for c in claims if c.kind == "cow_source"]
    assert [(c.rid, c.slot) for c in cow] == [(b.rid, state.requests[b.rid].cow_source)]
    drive.prefill(b, 44)
    drive.insert(list(range(100, 108)) + [7] * 8)  # a raw insert diverging at 8: another split
    state = steps.step()
    assert_partition(state, SLOTS)
    assert_agrees_with_sglang(state, scheduler)

    c = drive.admit(list(range(500, 532)))
    drive.prefill(c, 32)
    drive.retract(c)  # back to waiting, holding nothing
    drive.finish(b)
    state = steps.step()
    assert state.requests[c.rid].state == "waiting" and state.requests[c.rid].working_slot == -1

    scheduler.tree_cache.evict(EvictParams(num_tokens=0, mamba_num=2))
    state = steps.step()
    tombstone = next(r for r in state.nodes.values() if r.tombstone)
    drive.insert(path_tokens(state, tombstone.id))  # the same key again: the state comes back
    state = steps.step()
    assert not state.nodes[tombstone.id].tombstone and state.nodes[tombstone.id].mamba_slot >= 0
    scheduler.tree_cache.evict(EvictParams(num_tokens=16))
    state = steps.step()
    assert_partition(state, SLOTS)
    assert_agrees_with_sglang(state, scheduler)
    owners = {r.mamba_slot: r.id for r in state.nodes.values() if r.mamba_slot >= 0}
    assert steps.capture.tree_owners() == owners
    scheduler.tree_cache.tree_core.sanity_check([], [])
    assert errors.total == 0


def test_released_request_is_not_held(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """no_buffer hands a finished request's working slot to the tree and leaves the request's
    `mamba_pool_idx` pointing at it; at the step boundary the request is still in its batch,
    released: it holds nothing and is not listed."""
    sink, errors = hooks
    scheduler = build_cache(extra_buffer=False)
    drive, steps = Driver(scheduler), Stepper(scheduler, sink)
    a = drive.admit(list(range(100, 124)))
    drive.prefill(a, 24)
    working = int(a.kv.mamba_pool_idx)
    drive.finish(a, keep_in_batch=True)
    state = steps.step()
    assert a.kv.mamba_pool_idx is not None and a.rid not in state.requests
    assert [c.kind for c in state.slots[working]] == ["tree"]
    assert_partition(state, SLOTS)
    assert errors.total == 0


def test_admission_group_and_leaked_slot_are_claimed(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """Slots pre-allocated by an open admission group are `admission`; a slot nobody holds
    after the group closed is `unaccounted` (a leak the checks can see)."""
    sink, errors = hooks
    scheduler = build_cache()
    allocator = scheduler.req_to_token_pool.mamba_allocator
    steps = Stepper(scheduler, sink)
    allocator.alloc_group_begin(3)
    state = steps.step()
    assert sum(claims[0].kind == "admission" for claims in state.slots.values()) == 3
    leaked = int(allocator.alloc(1)[0])  # taken from the group, then dropped
    allocator.alloc_group_end()
    state = steps.step()
    assert {s for s, claims in state.slots.items() if claims[0].kind != "free"} == {leaked}
    assert state.slots[leaked][0].kind == "unaccounted"
    assert errors.total == 0


def test_lock_and_match_alone_are_seen(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """Steps whose only change is a lock ref or a match timestamp along a path."""
    sink, errors = hooks
    scheduler = build_cache()
    tree, drive = scheduler.tree_cache, Driver(scheduler)
    drive.insert(list(range(16)))
    drive.insert(list(range(8)) + [9] * 8)  # splits at 8: root -> [0, 8) -> [8, 16)
    steps = Stepper(scheduler, sink)
    leaf = next(r for r in steps.state.nodes.values() if r.depth == 8 and r.token_ids[0] == 8)
    path = [leaf.id, leaf.parent]
    first, second = tree.lock(leaf.id), tree.lock(leaf.id)
    state = steps.step()
    assert [state.nodes[n].full_lock for n in path] == [2, 2]
    tree.unlock(second)  # 2 -> 1: no node enters or leaves the evictable leaves
    state = steps.step()
    assert [state.nodes[n].full_lock for n in path] == [1, 1]
    assert {r.id for r in steps.parts.upsert_nodes} <= set(path)
    tree.unlock(first)
    steps.step()
    tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", range(16)))))
    state = steps.step()
    assert {r.id for r in steps.parts.upsert_nodes} == {*path, tree.tree_core.root_node.id}
    assert errors.total == 0


def test_unchanged_step_is_empty(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, _ = hooks
    scheduler = build_cache()
    drive = Driver(scheduler)
    drive.insert(list(range(16)))
    capture = Capture(scheduler, sink)
    capture.full_state(Step(0))
    assert capture.step(Step(1)).is_empty()


def test_free_list_reads_count_the_steps_whose_mamba_free_list_moved(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """The inspector samples the pool's peak occupancy at these steps only (the slots in use
    change with the free list alone)."""
    sink, _ = hooks
    scheduler = build_cache()
    drive = Driver(scheduler)
    capture = Capture(scheduler, sink)
    capture.full_state(Step(0))
    reads = capture.free_list_reads
    capture.step(Step(1))
    assert capture.free_list_reads == reads  # nothing moved
    drive.insert(list(range(16)))  # takes a slot
    capture.step(Step(2))
    assert capture.free_list_reads == reads + 1
    capture.step(Step(3))
    assert capture.free_list_reads == reads + 1


def test_an_inference_mode_free_list_is_compared_not_trusted(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """The scheduler's loop runs in inference mode: its free lists keep no version counter, so
    an unchanged one is recognised by its values, and an edit in place is still seen."""
    sink, _ = hooks
    scheduler = build_cache()
    Driver(scheduler).insert(list(range(16)))
    allocator = mamba_allocator(scheduler.req_to_token_pool)
    with torch.inference_mode():
        allocator.free_slots = allocator.free_slots.clone()  # bound as the scheduler binds them
    capture = Capture(scheduler, sink)
    capture.full_state(Step(0))
    assert capture.step(Step(1)).is_empty()
    assert capture._read_free() is capture._free  # not read again: the last bitmap itself
    listed = allocator.free_slots
    lost = int(listed[0])
    with torch.inference_mode():
        listed[0] = listed[1]  # an edit in place, which sglang never makes: no version tells it
    parts = capture.step(Step(2))
    assert [claim.kind for claim in parts.slots[SlotId(lost)]] == ["unaccounted"]


def test_events_describe_what_happened(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, errors = hooks
    scheduler = build_cache()
    drive = Driver(scheduler)
    capture = Capture(scheduler, sink)
    capture.full_state(Step(0))
    sink.drain(Step(0))
    a = drive.admit(list(range(40)))
    drive.prefill(a, 16)
    drive.prefill(a, 40)
    drive.finish(a)
    b = drive.admit(list(range(200, 232)))
    drive.prefill(b, 16)
    drive.retract(b)
    scheduler.tree_cache.evict(EvictParams(num_tokens=0, mamba_num=1))
    state = capture.full_state(Step(1))
    events = sink.drain(Step(1))
    kinds = [type(e).__name__ for e in events]
    assert {"MatchEvent", "InsertEvent", "LockEvent", "SlotEvent", "EvictEvent", "RequestEvent"} <= set(kinds)
    assert all(e.step == 1 for e in events)
    match = next(e for e in events if isinstance(e, MatchEvent))
    assert (match.rid, match.hit_len, match.cow_source) == (a.rid, 0, -1)
    inserts = [e for e in events if isinstance(e, InsertEvent)]
    assert [(e.rid, e.seqlen) for e in inserts] == [(a.rid, 16), (a.rid, 40), (b.rid, 16)]
    assert inserts[0].ping_pong_index in (0, 1) and inserts[1].ping_pong_index in (0, 1)
    locks = [(e.locked, e.rid) for e in events if isinstance(e, LockEvent)]
    assert locks[0] == (True, a.rid) and (False, a.rid) in locks
    evict = next(e for e in events if isinstance(e, EvictEvent))
    assert len(evict.slots) == 1 and evict.nodes
    assert all(c[0].kind == "free" for s, c in state.slots.items() if s in evict.slots)
    freed = [s for e in events if isinstance(e, SlotEvent) and not e.allocated for s in e.slots]
    assert evict.slots[0] in freed
    assert [(e.what, e.rid) for e in events if isinstance(e, RequestEvent)] == [("finish", a.rid), ("retract", b.rid)]
    assert errors.total == 0


def test_unobserved_step_keeps_no_events_but_counts_evictions(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, errors = hooks
    scheduler = build_cache()
    drive = Driver(scheduler)
    Capture(scheduler, sink).full_state(Step(0))
    for first in (0, 100):  # two cached prefixes, each with its own mamba slot
        req = drive.admit(list(range(first, first + 40)))
        drive.prefill(req, 40)
        drive.finish(req)
    sink.drain(Step(0))
    slots, kv = scheduler.req_to_token_pool.mamba_allocator, scheduler.token_to_kv_pool_allocator
    before = (sink.evicted_slots, sink.evicted_tokens, slots.available_size(), kv.available_size())
    sink.observed = False
    scheduler.tree_cache.evict(EvictParams(num_tokens=0, mamba_num=2))
    assert sink.drain(Step(1)) == []
    # what sglang's own allocators got back
    freed_slots, freed_tokens = slots.available_size() - before[2], kv.available_size() - before[3]
    assert freed_slots >= 2 and freed_tokens > 0
    assert (sink.evicted_slots - before[0], sink.evicted_tokens - before[1]) == (freed_slots, freed_tokens)
    assert errors.total == 0


def test_event_list_is_bounded() -> None:
    sink = EventSink(max_events=2)
    for _ in range(5):
        sink.emit(RequestEvent, rid="r", what="admit")
    assert len(sink.drain(Step(1))) == 2 and sink.dropped_events == 3


def test_rust_core_shows_request_paths_and_tree_slots(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, errors = hooks
    scheduler = build_cache(core="rust")
    tree = scheduler.tree_cache
    assert type(tree.tree_core).__name__ == "RustUnifiedTreeCore"
    drive, steps = Driver(scheduler), Stepper(scheduler, sink)
    assert not steps.capture.full_detail
    a = drive.admit(list(range(100, 140)))
    drive.prefill(a, 16)
    drive.prefill(a, 32)  # a second chunk: the path now has two nodes
    state = steps.step()
    path = tree.tree_core.collect_path_info([a.lock.node])[0]
    visible = {info.node_id: info for info in path}
    assert set(state.nodes) == set(visible) | {tree.tree_core.root_node_handle()}
    for node_id, info in visible.items():
        record = state.nodes[node_id]
        assert (record.parent, record.depth, record.key_len) == (info.parent_id, info.path_start, info.path_end - info.path_start)
        assert record.token_ids == list(range(100 + info.path_start, 100 + info.path_end))
        assert record.full_lock == -1 and not record.in_mamba_lru
    tree_slots = {s for s, claims in state.slots.items() if claims[0].kind == "tree"}
    assert tree_slots == set(tree.all_mamba_values_flatten().tolist())
    assert_partition(state, SLOTS)
    drive.finish(a)  # no request holds a lock: no visible nodes; the slots stay tree-owned
    state = steps.step()
    assert set(state.nodes) == {tree.tree_core.root_node_handle()}
    hidden = [claims[0] for claims in state.slots.values() if claims[0].kind == "tree"]
    assert hidden and all(c.node == -1 for c in hidden)
    assert steps.capture.tree_owners() == {c.slot: -1 for c in hidden}
    assert_partition(state, SLOTS)
    assert errors.total == 0


def test_engine_info_reads_one_slots_state_layout_from_the_pool() -> None:
    """cpu_cache's pool: one mamba layer, Mamba2 shape with intermediate 16, 1 group, d_state 4,
    1 head of dim 4, kernel 4, both tensors bf16 (SGLANG_MAMBA_SSM_DTYPE)."""
    from mcinspect_engine_hooks.families import family_of_architecture
    from mcinspect_engine_hooks.inspector import state_shapes

    cache = cpu_cache.build_cache()
    shapes = state_shapes(cache.req_to_token_pool.mamba_pool)
    conv_channels = 16 + 2 * 1 * 4  # x | B | C
    assert shapes["conv_shapes"] == ((1, conv_channels, 3),) and shapes["conv_dtypes"] == ("bfloat16",)
    assert shapes["temporal_shape"] == (1, 1, 4, 4) and shapes["temporal_dtype"] == "bfloat16"
    assert shapes["state_bytes_per_slot"] == (conv_channels * 3 + 1 * 4 * 4) * 2
    assert family_of_architecture("NemotronHForCausalLM").name == "nemotron-h"
    assert family_of_architecture("LlamaForCausalLM") is None
