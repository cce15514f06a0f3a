"""Hook bodies: schema events, and the dirty marks that let `Capture.step` skip the tree.

`hook_points(sink, errors)` lists (sglang target, "before" | "after" | "around", guarded
body) for the plugin to register with sglang's HookRegistry. Every body only reads sglang state
and writes into the `EventSink`; each is wrapped by `ErrorCounter.guard`, so a failure is
counted and swallowed, never raised into the scheduler. The dirty marks and the eviction counts
run at every step; the hooks that only make events (marked "observed" below) run only in steps
a capture will end (`EventSink.observed`), and return at their first frame in the others. Per call a body does O(1) work, except the path
marks (O(depth), the same walk sglang just did) and the decode track plan (O(batch), only on
the steps where some request reaches a checkpoint boundary). Tensors are never read in a hook:
slot ids are kept as tensors (cloned when sglang may overwrite them) and turned into ints once
per step in `EventSink.drain`.

Checked against sglang 0.5.23. Paths below are relative to `sglang.srt.`:

| sglang method | hook | what mcinspect does |
|---|---|---|
| `mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore._unregister_node` | after | node removed: dirty, forget tombstone, eviction record |
| `...UnifiedTreeCore._update_evictable_leaf_sets` | after | most node changes end here (see below): dirty |
| `...UnifiedTreeCore._touch_node` | after | the insert walk stamped last_access: dirty |
| `...UnifiedTreeCore._match_post_processor` | after | a match stamped last_access root..best match: dirty path |
| `...UnifiedTreeCore._evict_component_and_detach_lru` | after | a component value freed: dirty, tombstone, eviction record |
| `...UnifiedTreeCore.set_component_device_value` | after | a state given to an existing node (also HiCache load-back): dirty |
| `mem_cache.unified_cache.components.full.FullComponent.acquire_component_lock`, `.release_component_lock` | after | FULL lock refs change along the whole path: dirty path |
| `mem_cache.unified_cache.components.mamba.MambaComponent.cleanup_after_caching_req` | before, observed | InsertEvent (slot, node, seqlen, donated ping-pong index) |
| `mem_cache.unified_radix_cache.UnifiedRadixCache.match_prefix` | after, observed | MatchEvent; remembers the request for lock attribution |
| `...UnifiedRadixCache.lock` / `.unlock` | after / before, observed | LockEvent |
| `...UnifiedRadixCache.checkpoint_into_tree` | around, observed | request context for the lock moves it makes |
| `...UnifiedRadixCache.claim_kv_row` | before, observed | request context for release_kv_cache's unlock |
| `...UnifiedRadixCache.evict`, `.evict_for_alloc` | around, observed | one EvictEvent per outermost eviction |
| `...UnifiedRadixCache._apply_eviction_result` | before | eviction counts; freed tree slots and KV tokens of each eviction step |
| `...UnifiedRadixCache.on_release` | after, observed | RequestEvent finish |
| `mem_cache.allocator.mamba.MambaSlotAllocator._do_alloc` / `.free` | after / before, observed | SlotEvent |
| `...MambaSlotAllocator.alloc_group_begin` / `.alloc_group_end` | before / after, observed | admission group's pre-allocated slots |
| `managers.schedule_batch.ScheduleBatch.prepare_for_extend` | before, observed | RequestEvent admit (requests without a KV row yet) |
| `...ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend` | after, observed | TrackPlanEvent (prefill) |
| `...ScheduleBatch.prepare_for_decode` | after, observed | TrackPlanEvent (decode boundary) |
| `managers.schedule_batch.Req.reset_for_retract` | after, observed | RequestEvent retract |
| `model_executor.model_runner.ModelRunner._maybe_execute_deferred_mamba_cow_and_clear` | around, observed | CowEvent with fingerprints (cow_hooks.py) |
| (the track-write hooks of `write_hooks.py`) | before / after, observed | TrackWriteEvent: the writes each forward ran |

The UnifiedTreeCore / FullComponent rows fire only with sglang's Python tree core; the Rust
core runs that logic natively (see adapter_0523's "What the Rust core cannot show"). Node
changes covered without a hook of their own: new nodes (Capture scans the arena's tail);
`_split_node`, `inc_lock_ref` / `dec_lock_ref` (the MAMBA lock is the anchor's alone) and
`_cascade_evict` / `_unevict_node_on_insert` all end in `_update_evictable_leaf_sets` on the
nodes they changed; hit counts and insert-time LRU / last_access updates happen on nodes the
same insert walk touched; LRU membership changes only with a value that is marked anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

from mcinspect.schema import InsertEvent, LockEvent, MatchEvent, NodeId, RequestEvent, Rid, SlotEvent, TrackPlanEvent

from .cow_hooks import cow_hook
from .event_sink import DeferredSlot, DeferredSlots, EventSink
from .guard import ErrorCounter
from .state_log import StateLog
from .write_hooks import WriteHooks, write_hook_points

__all__ = ["EventSink", "HookPoint", "hook_points", "state_log_points"]

_SRT = "sglang.srt."
TREE_CORE = _SRT + "mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore"
FULL_COMPONENT = _SRT + "mem_cache.unified_cache.components.full.FullComponent"
MAMBA_COMPONENT = _SRT + "mem_cache.unified_cache.components.mamba.MambaComponent"
CACHE = _SRT + "mem_cache.unified_radix_cache.UnifiedRadixCache"
MAMBA_ALLOCATOR = _SRT + "mem_cache.allocator.mamba.MambaSlotAllocator"
SCHEDULE_BATCH = _SRT + "managers.schedule_batch.ScheduleBatch"
REQ = _SRT + "managers.schedule_batch.Req"

MAMBA = ComponentType.MAMBA
FULL = ComponentType.FULL


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """A hooked method's argument, whether sglang passed it by position or by name."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _opt(value: int | None) -> int:
    return -1 if value is None else int(value)


class _TreeHooks:
    """Dirty marks from the Python tree core (the Rust core never calls these)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def node_gone(self, ret: Any, core: Any, /, *args: Any, **kwargs: Any) -> None:
        node = _arg(args, kwargs, 0, "node")
        self.sink.mark(node.id)
        self.sink.tombstones.discard(node.id)
        self.sink.evicting(node.id)

    def node_changed(self, ret: Any, core: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.mark(_arg(args, kwargs, 0, "node").id)

    def matched(self, ret: Any, core: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.mark_path(core.node_by_id(ret.best_match_node))

    def component_evicted(self, ret: Any, core: Any, /, *args: Any, **kwargs: Any) -> None:
        node, component = _arg(args, kwargs, 0, "node"), _arg(args, kwargs, 1, "comp")
        self.sink.mark(node.id)
        self.sink.evicting(node.id)
        mamba_gone = component.component_type == MAMBA and node.component_data[MAMBA].value is None
        if mamba_gone and node.id in core._node_arena:
            self.sink.tombstones.add(node.id)

    def value_set(self, ret: Any, core: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.mark(_arg(args, kwargs, 0, "node_id"))

    def path_lock(self, ret: Any, component: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.mark_path(_arg(args, kwargs, 0, "node"))


class _CacheHooks:
    """Events from UnifiedRadixCache and its MAMBA component (both tree cores)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def matched(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "params").req
        if req is not None:
            self.sink.request = req
        cow = req.kv.mamba_cow_src_index if req is not None else None
        self.sink.emit(
            MatchEvent,
            rid=Rid(req.rid if req is not None else ""),
            hit_len=int(ret.device_prefix_len),
            node=NodeId(ret.last_device_node),
            cow_source=DeferredSlot(cow),
        )

    def locked(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node_id = _arg(args, kwargs, 0, "node_id")
        if ret is None:  # a streaming session's virtual node
            return
        sink = self.sink
        req = sink.checkpointing
        if req is None and sink.request is not None and sink.request.last_node == node_id:
            req = sink.request
        sink.emit(LockEvent, node=NodeId(node_id), rid=Rid(req.rid if req is not None else ""), locked=True)

    def unlocking(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        lock = _arg(args, kwargs, 0, "lock")
        if lock is None:
            return
        owner = next((r for r in (self.sink.checkpointing, self.sink.request) if r is not None and r.lock is lock), None)
        rid = Rid(owner.rid if owner is not None else "")
        self.sink.emit(LockEvent, node=NodeId(lock.node), rid=rid, locked=False)

    def releasing_row(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.request = _arg(args, kwargs, 0, "req")  # lock attribution

    def checkpoint_begin(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "req")
        self.sink.request = req
        self.sink.checkpointing = req

    def checkpoint_end(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.checkpointing = None

    def evict_begin(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.evict_begin()

    def evict_end(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.evict_end()

    def eviction_result(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        frees = _arg(args, kwargs, 0, "result").device_frees
        full_tokens = sum(int(t.numel()) for t in frees.get(FULL, ()))
        self.sink.evicted_values(list(frees.get(MAMBA, ())), full_tokens)

    def inserting(self, component: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before cleanup_after_caching_req: the insert is done, the request not yet reset."""
        req = _arg(args, kwargs, 0, "req")
        is_finished = _arg(args, kwargs, 1, "is_finished")
        result = _arg(args, kwargs, 2, "insert_result")
        params = _arg(args, kwargs, 3, "insert_params")
        if result is None or result.mamba_exist or params is None or params.mamba_value is None:
            return
        donated = component.cache.enable_mamba_extra_buffer and component.int8_ckpt_pool is None
        index = -1
        if donated:
            index = _opt(params.mamba_keep_idx if is_finished else req.kv.mamba_last_track_idx)
        self.sink.emit(
            InsertEvent,
            rid=Rid(req.rid),
            node=NodeId(result.last_device_node),
            slot=DeferredSlot(params.mamba_value),
            seqlen=len(params.key) if params.key is not None else -1,
            ping_pong_index=index,
        )

    def released(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "req")
        if req.finished():
            self.sink.emit(RequestEvent, rid=Rid(req.rid), what="finish")


class _PoolHooks:
    """Slot alloc/free, admission groups, request admission, track plans, retraction."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def allocated(self, ret: Any, allocator: Any, /, *args: Any, **kwargs: Any) -> None:
        if ret is not None:  # a slice of a free list that sglang never edits in place
            self.sink.emit(SlotEvent, slots=DeferredSlots([ret]), allocated=True)

    def freeing(self, allocator: Any, /, *args: Any, **kwargs: Any) -> None:
        free_index = _arg(args, kwargs, 0, "free_index")
        if free_index.numel():
            # Often a view of a device mirror row that is reused later in the step: copy it now.
            self.sink.emit(SlotEvent, slots=DeferredSlots([free_index.detach().clone()]), allocated=False)

    def group_begin(self, allocator: Any, /, *args: Any, **kwargs: Any) -> None:
        num_reqs = _arg(args, kwargs, 0, "num_reqs")
        fits = 0 < num_reqs <= allocator.available_size()
        self.sink.admission = allocator.free_slots[:num_reqs] if fits else None

    def group_end(self, ret: Any, allocator: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.admission = None

    def admitting(self, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        for req in batch.reqs:
            if not req.kv.holds_kv:  # a continuing chunk keeps its row
                self.sink.emit(RequestEvent, rid=Rid(req.rid), what="admit")

    def prefill_track(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "req")
        if not ret.track_mask:
            return
        # The buffer entry is rewritten in place when the slot is donated: copy it now.
        slot = req.kv.mamba_ping_pong_track_buffer[ret.track_position].clone()
        position = _opt(req.kv.mamba_last_track_seqlen)
        self.sink.emit(TrackPlanEvent, rid=Rid(req.rid), slot=DeferredSlot(slot), position=position, forward="extend")

    def decode_track(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mask = getattr(batch, "mamba_track_mask_cpu", None)
        if not mask or True not in mask:
            return
        rows = zip(batch.reqs, mask, batch.mamba_track_buffer_indices, batch.seq_lens_cpu.tolist())
        for req, at_boundary, position, seqlen in rows:
            buffer = req.kv.mamba_ping_pong_track_buffer
            if at_boundary and buffer is not None:
                slot = DeferredSlot(buffer[position].clone())
                self.sink.emit(TrackPlanEvent, rid=Rid(req.rid), slot=slot, position=int(seqlen), forward="decode")

    def retracted(self, ret: Any, req: Any, /, *args: Any, **kwargs: Any) -> None:
        """After Req.reset_for_retract (`req` is the method's self)."""
        self.sink.emit(RequestEvent, rid=Rid(req.rid), what="retract")


HookPoint = tuple[str, str, Callable[..., Any]]
"""(dotted sglang target, "before" | "after" | "around", guarded hook)."""


def hook_points(sink: EventSink, errors: ErrorCounter, *, track_writes: bool = True) -> list[HookPoint]:
    """The hooks for sglang's HookRegistry, each guarded. Dirty marks and eviction counts run at
    every step; hooks whose only product is an event run in observed steps only; the hooks
    inside the forward (track writes) only with `track_writes`."""
    tree, cache, pools = _TreeHooks(sink), _CacheHooks(sink), _PoolHooks(sink)
    writes = WriteHooks(sink)
    every_step = [
        (f"{TREE_CORE}._unregister_node", "after", tree.node_gone),
        (f"{TREE_CORE}._update_evictable_leaf_sets", "after", tree.node_changed),
        (f"{TREE_CORE}._touch_node", "after", tree.node_changed),
        (f"{TREE_CORE}._match_post_processor", "after", tree.matched),
        (f"{TREE_CORE}._evict_component_and_detach_lru", "after", tree.component_evicted),
        (f"{TREE_CORE}.set_component_device_value", "after", tree.value_set),
        (f"{FULL_COMPONENT}.acquire_component_lock", "after", tree.path_lock),
        (f"{FULL_COMPONENT}.release_component_lock", "after", tree.path_lock),
        (f"{CACHE}._apply_eviction_result", "before", cache.eviction_result),
    ]
    observed_only = [
        (f"{MAMBA_COMPONENT}.cleanup_after_caching_req", "before", cache.inserting),
        (f"{CACHE}.match_prefix", "after", cache.matched),
        (f"{CACHE}.lock", "after", cache.locked),
        (f"{CACHE}.unlock", "before", cache.unlocking),
        (f"{CACHE}.claim_kv_row", "before", cache.releasing_row),
        (f"{CACHE}.on_release", "after", cache.released),
        (f"{MAMBA_ALLOCATOR}._do_alloc", "after", pools.allocated),
        (f"{MAMBA_ALLOCATOR}.free", "before", pools.freeing),
        (f"{MAMBA_ALLOCATOR}.alloc_group_begin", "before", pools.group_begin),
        (f"{MAMBA_ALLOCATOR}.alloc_group_end", "after", pools.group_end),
        (f"{SCHEDULE_BATCH}.prepare_for_extend", "before", pools.admitting),
        (f"{SCHEDULE_BATCH}._mamba_radix_cache_v2_req_prepare_for_extend", "after", pools.prefill_track),
        (f"{SCHEDULE_BATCH}.prepare_for_decode", "after", pools.decode_track),
        (f"{REQ}.reset_for_retract", "after", pools.retracted),
        *(write_hook_points(writes) if track_writes else []),
    ]
    observed_around = [  # (target, before, after)
        (f"{CACHE}.checkpoint_into_tree", cache.checkpoint_begin, cache.checkpoint_end),
        (f"{CACHE}.evict", cache.evict_begin, cache.evict_end),
        (f"{CACHE}.evict_for_alloc", cache.evict_begin, cache.evict_end),
        cow_hook(sink),
    ]
    return [
        *[(target, when, errors.guard(fn)) for target, when, fn in every_step],
        *[(target, when, errors.guard_observed(fn, sink)) for target, when, fn in observed_only],
        *[(target, "around", errors.around_observed(before, after, sink)) for target, before, after in observed_around],
    ]


def state_log_points(log: StateLog, errors: ErrorCounter) -> list[HookPoint]:
    """The StateLog's hooks (state_log.py), each guarded; they run at every step: the verifier
    needs every state's prefix tokens and origin, observed steps or not."""
    points = [
        (f"{MAMBA_COMPONENT}.cleanup_after_caching_req", "before", log.inserting),
        (f"{SCHEDULE_BATCH}.prepare_for_extend", "after", log.extend_planned),
        (f"{SCHEDULE_BATCH}.prepare_for_decode", "after", log.decode_planned),
        (f"{SCHEDULE_BATCH}._collect_deferred_mamba_cow_and_clear", "before", log.collecting_copies),
        (f"{SCHEDULE_BATCH}.mix_with_running", "after", log.mixed),
    ]
    return [(target, when, errors.guard(fn)) for target, when, fn in points]
