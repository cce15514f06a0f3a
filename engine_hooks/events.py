"""Hook bodies: schema events, and the dirty marks that let `Capture.step` skip the tree.

`hook_points(sink, errors, log, hooks)` lists (sglang target, "before" | "after" | "around",
guarded body) for the plugin to register with sglang's HookRegistry. Every body only reads sglang state
and writes into the `EventSink`; each is wrapped by `ErrorCounter.guard`, so a failure is
counted and swallowed, never raised into the scheduler. The dirty marks and the eviction counts
run at every step; the hooks that only make events (marked "observed" below) run only in steps
a capture will end (`EventSink.observed`), and return at their first frame in the others. Per call a body does O(1) work, except the path
marks (O(depth), the same walk sglang just did) and the decode track plan (O(batch), only on
the steps where some request reaches a checkpoint boundary). No hook syncs a device: slot ids
sglang may overwrite are kept as they are now (`tensor_runs.kept`: their ints on the host, a
device copy elsewhere) and the rest stay tensors, all turned into ints once per step in
`EventSink.drain`.

The targets, when each body runs and what it does: `hooks_0523.HOOKS` (the one hook table).

The UnifiedTreeCore / FullComponent rows fire only with sglang's Python tree core; the Rust
core runs that logic natively (see adapter_0523's "What the Rust core cannot show"). Node
changes covered without a hook of their own: new nodes (Capture scans the arena's tail);
`_split_node`, `inc_lock_ref` / `dec_lock_ref` (the MAMBA lock is the anchor's alone) and
`_cascade_evict` / `_unevict_node_on_insert` all end in `_update_evictable_leaf_sets` on the
nodes they changed; hit counts and insert-time LRU / last_access updates happen on nodes the
same insert walk touched; LRU membership changes only with a value that is marked anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mcinspect.schema import InsertEvent, LockEvent, MatchEvent, NodeId, RequestEvent, Rid, SlotEvent, TrackPlanEvent

from .components import FULL, MAMBA
from .cow_hooks import CowHooks
from .event_sink import DeferredSlot, DeferredSlots, EventSink
from .events_0516 import Radix0516Hooks
from .events_mrc import MrcHooks
from .guard import ErrorCounter
from .hooks_0516 import MARKS as MARKS_0516
from .hooks_0523 import Hook
from .hooks_mrc import MARKS
from .marks_0516 import Marks0516
from .mrc_marks import MrcMarks
from .req_kv import decode_track_entries, decode_track_mask, kv_of, node_id_of
from .state_log import StateLog
from .tensor_runs import kept
from .write_hooks import WriteHooks

__all__ = ["EventSink", "HookPoint", "hook_points"]


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """A hooked method's argument, whether sglang passed it by position or by name."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _opt(value: int | None) -> int:
    return -1 if value is None else int(value)


class _TreeHooks:
    """Dirty marks from the Python tree core, and from 0.5.16's cache, which has the same
    methods (the Rust core never calls these)."""

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
        if self.sink.checkpointing is not None:  # 0.5.21: a chunk checkpoint's rematch, not an admission
            return
        req = _arg(args, kwargs, 0, "params").req
        if req is not None:
            self.sink.request = req
        cow = kv_of(req).mamba_cow_src_index if req is not None else None
        hit_len = ret.device_prefix_len if hasattr(ret, "device_prefix_len") else len(ret.device_indices)  # 0.5.21
        self.sink.emit(
            MatchEvent,
            rid=Rid(req.rid if req is not None else ""),
            hit_len=int(hit_len),
            node=NodeId(node_id_of(ret.last_device_node)),  # 0.5.16: the node itself
            cow_source=DeferredSlot(cow),
        )

    def locked(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node_id = _arg(args, kwargs, 0, "node_id")
        if ret is None or not isinstance(node_id, int):  # a streaming session's virtual node
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

    def lock_ref_dropping(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """0.5.21: `dec_lock_ref(node_id, params)`; a request's lock is the one on its last_node."""
        node_id = _arg(args, kwargs, 0, "node_id")
        if not isinstance(node_id, int):  # a streaming session's virtual node
            return
        owner = next((r for r in (self.sink.checkpointing, self.sink.request) if r is not None and r.last_node == node_id), None)
        self.sink.emit(LockEvent, node=NodeId(node_id), rid=Rid(owner.rid if owner is not None else ""), locked=False)

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
        self._freed(_arg(args, kwargs, 0, "result").device_frees)

    def values_freed(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """0.5.22: `_free_values(device_frees, host_frees)`, called with each eviction result."""
        self._freed(_arg(args, kwargs, 0, "device_frees"))

    def _freed(self, frees: Any) -> None:
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
            # 0.5.21 has no mamba_keep_idx: its cleanup keeps the last tracked index.
            last = kv_of(req).mamba_last_track_idx
            keep = getattr(params, "mamba_keep_idx", last)
            index = _opt(keep if is_finished else last)
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

    def finished_cached(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """0.5.20: after `cache_finished_req(req, ...)`; a streaming session that detached the
        row released nothing (0.5.21's claim_kv_row returns before on_release there)."""
        req = _arg(args, kwargs, 0, "req")
        if kv_of(req).holds_kv:
            self.released(ret, cache, *args, **kwargs)


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
            self.sink.emit(SlotEvent, slots=DeferredSlots([kept(free_index)]), allocated=False)

    def group_begin(self, allocator: Any, /, *args: Any, **kwargs: Any) -> None:
        num_reqs = _arg(args, kwargs, 0, "num_reqs")
        fits = 0 < num_reqs <= allocator.available_size()
        self.sink.admission = allocator.free_slots[:num_reqs] if fits else None

    def group_end(self, ret: Any, allocator: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.admission = None

    def admitting(self, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        for req in batch.reqs:
            if not kv_of(req).holds_kv:  # a continuing chunk keeps its row
                self.sink.emit(RequestEvent, rid=Rid(req.rid), what="admit")

    def prefill_track(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "req")
        if ret is None:  # 0.5.12 returns no entry: it appends the plan to the batch's lists it is given
            if not _arg(args, kwargs, 1, "mamba_track_mask_cpu")[-1]:
                return
            slot = int(_arg(args, kwargs, 2, "mamba_track_indices_cpu")[-1])  # the slot id, as 0.5.22's entry
        elif not ret.track_mask:
            return
        elif hasattr(ret, "track_position"):  # the buffer entry is rewritten when the slot is donated: copy it now
            slot = kept(kv_of(req).mamba_ping_pong_track_buffer[ret.track_position])
        else:  # 0.5.22: the entry carries the slot id itself
            slot = int(ret.track_index)
        position = _opt(kv_of(req).mamba_last_track_seqlen)
        self.sink.emit(TrackPlanEvent, rid=Rid(req.rid), slot=DeferredSlot(slot), position=position, forward="extend")

    def decode_track(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mask = decode_track_mask(batch)
        if not mask or True not in mask:
            return
        rows = zip(batch.reqs, mask, decode_track_entries(batch), batch.seq_lens_cpu.tolist())
        for req, at_boundary, position, seqlen in rows:
            buffer = kv_of(req).mamba_ping_pong_track_buffer
            if at_boundary and buffer is not None:
                slot = DeferredSlot(kept(buffer[position]))
                self.sink.emit(TrackPlanEvent, rid=Rid(req.rid), slot=slot, position=int(seqlen), forward="decode")

    def retracted(self, ret: Any, req: Any, /, *args: Any, **kwargs: Any) -> None:
        """After Req.reset_for_retract (`req` is the method's self)."""
        self.sink.emit(RequestEvent, rid=Rid(req.rid), what="retract")


HookPoint = tuple[str, str, Callable[..., Any]]
"""(dotted sglang target, "before" | "after" | "around", guarded hook)."""


def hook_points(
    sink: EventSink, errors: ErrorCounter, log: StateLog, hooks: Sequence[Hook], *, track_writes: bool = True
) -> list[HookPoint]:
    """The rows of `hooks` (a generation's table as this release has it: generations.select)
    bound to their bodies, each guarded by its kind: `every` and `state` at every step,
    `observed` / `write` only in observed steps (`write` only with `track_writes`), `around`
    as an observed before / after pair. `scheduler` rows are the plugin's own."""
    owners: dict[str, Any] = {
        "tree": _TreeHooks(sink),
        "cache": _CacheHooks(sink),
        "pools": _PoolHooks(sink),
        "state": log,
        "write": WriteHooks(sink),
        "cow": CowHooks(sink),
        "mrc": MrcHooks(sink, log),
        "radix0516": Radix0516Hooks(sink, log),
        "marks": MrcMarks(sink),
        "marks0516": Marks0516(sink),
    }
    # Partial marks would leave records stale.
    sink.node_map_hooked = any(all(row in hooks for row in marks) for marks in (MARKS, MARKS_0516))

    def body(name: str, suffix: str = "") -> Callable[..., Any]:
        """Row body "owner.method" (an around row's pair: method_begin / method_end)."""
        owner, method = name.split(".")
        return getattr(owners[owner], method + suffix)

    points: list[HookPoint] = []
    for hook in hooks:
        if hook.kind in ("every", "state"):
            points.append((hook.dotted, hook.when, errors.guard(body(hook.body))))
        elif hook.kind == "observed" or (hook.kind == "write" and track_writes):
            points.append((hook.dotted, hook.when, errors.guard_observed(body(hook.body), sink)))
        elif hook.kind == "around":
            points.append((hook.dotted, "around", errors.around_observed(body(hook.body, "_begin"), body(hook.body, "_end"), sink)))
    return points
