"""Hook bodies of the MambaRadixCache generation (hooks_mrc.HOOKS rows "mrc.*"): events and
eviction records from sglang's MambaRadixCache, whose TreeNodes carry their own values, lock
refs and LRU links. Read-only and guarded like events.py's bodies; the dirty marks are
mrc_marks.py's."""

from __future__ import annotations

from typing import Any

from mcinspect.schema import InsertEvent, LockEvent, MatchEvent, NodeId, RequestEvent, Rid, TrackPlanEvent

from .event_sink import DeferredSlot, EventSink
from .state_log import StateLog
from .tensor_runs import kept


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _int8_off(cache: Any) -> bool:
    """No int8 checkpoint pool (0.5.13 has none at all): the tree takes the ping-pong slot."""
    return getattr(cache, "int8_ckpt_pool", None) is None


def _donates(cache: Any, checkpoint: bool) -> bool:
    """The tree takes the request's ping-pong slot itself (extra_buffer, no int8 pool): at a
    finish, and at a chunk checkpoint where the pool donates (`donate_mamba_ping_pong_slot`,
    0.5.13 on). 0.5.12's checkpoint inserts a fork instead: a fresh slot, a copy of the keep
    entry (`MambaPool.fork_from`), so no ping-pong index."""
    if not (cache.enable_mamba_extra_buffer and _int8_off(cache)):
        return False
    return not checkpoint or hasattr(cache.req_to_token_pool, "donate_mamba_ping_pong_slot")


def keep_idx(pool: Any, req: Any) -> int:
    """The ping-pong entry the tree takes (`get_mamba_ping_pong_keep_idx`, 0.5.13 on). 0.5.12
    has no lazy mode and no such method: its cache_finished_req keeps the "other" entry of
    `mamba_next_track_idx` (`get_mamba_ping_pong_other_idx`), the keep method's eager branch."""
    keep = getattr(pool, "get_mamba_ping_pong_keep_idx", None)
    if keep is not None:
        return int(keep(req))
    return int(pool.get_mamba_ping_pong_other_idx(req.mamba_next_track_idx))


class MrcHooks:
    def __init__(self, sink: EventSink, log: StateLog) -> None:
        self.sink = sink
        self.log = log

    # --- evictions (every step: they feed the stats) ---

    def leaf_evicting(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node = _arg(args, kwargs, 0, "x")
        self.sink.evicting(node.id)
        self.sink.evicted_values([node.mamba_value], len(node.value))

    def tombstoning(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node = _arg(args, kwargs, 0, "node")
        self.sink.evicting(node.id)
        self.sink.tombstones.add(node.id)
        self.sink.evicted_values([node.mamba_value], 0)

    def tombstone_deleting(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node = _arg(args, kwargs, 0, "node")
        self.sink.evicting(node.id)
        self.sink.tombstones.discard(node.id)
        self.sink.evicted_values([], len(node.value))

    # --- events (observed steps only) ---

    def inserted(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """After MambaRadixCache.insert: a new state is the mamba LRU's newest entry (a new
        leaf and a filled tombstone both go in through `insert_mru`)."""
        params = _arg(args, kwargs, 0, "params")
        req = self.sink.checkpointing or self.sink.request
        if ret.mamba_exist or params.mamba_value is None or req is None:
            return
        node = cache.mamba_lru_list.head.mamba_next
        index = -1
        if _donates(cache, checkpoint=self.sink.checkpointing is not None):
            index = keep_idx(cache.req_to_token_pool, req)
        self.sink.emit(
            InsertEvent,
            rid=Rid(req.rid),
            node=NodeId(node.id),
            slot=DeferredSlot(params.mamba_value),
            seqlen=len(params.key),
            ping_pong_index=index,
        )

    def state_inserted(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """After MambaRadixCache.insert, at every step: the state's prefix for T2 (StateLog)."""
        params = _arg(args, kwargs, 0, "params")
        finishing = self.sink.checkpointing is None
        req = self.sink.request if finishing else self.sink.checkpointing
        if ret.mamba_exist or params.mamba_value is None or req is None:
            return
        node = cache.mamba_lru_list.head.mamba_next
        donated = _donates(cache, checkpoint=not finishing)
        self.log.inserted(params.mamba_value, node.id, params.key, Rid(req.rid), donated, finishing)

    def decode_track(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        """After ScheduleBatch.prepare_for_decode: these releases keep no CPU mask on the batch,
        so the rows are sglang's own rule (seq_lens_cpu % mamba_track_interval == 0, the mask
        it just built) and the slot the one set_mamba_track_indices_from_reqs gathered
        (buffer[mamba_next_track_idx]). No mask: not extra_buffer, or spec decoding."""
        if getattr(batch, "mamba_track_mask", None) is None or not batch.reqs:
            return
        from sglang.srt.server_args import get_global_server_args  # imported by sglang already

        interval = get_global_server_args().mamba_track_interval
        for req, seqlen in zip(batch.reqs, batch.seq_lens_cpu.tolist()):
            buffer, index = req.mamba_ping_pong_track_buffer, req.mamba_next_track_idx
            if seqlen % interval == 0 and buffer is not None and index is not None:
                slot = DeferredSlot(kept(buffer[index]))  # the entry is rewritten when donated
                self.sink.emit(TrackPlanEvent, rid=Rid(req.rid), slot=slot, position=int(seqlen), forward="decode")

    def matched(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "params").req
        if req is not None:
            self.sink.request = req
        self.sink.emit(
            MatchEvent,
            rid=Rid(req.rid if req is not None else ""),
            hit_len=len(ret.device_indices),
            node=NodeId(ret.last_device_node.id),
            cow_source=DeferredSlot(getattr(req, "mamba_cow_src_index", None)),  # none on 0.5.12
        )

    def _owner(self, node: Any) -> Any:
        """The request a lock move on `node` is for: the checkpointing or releasing one, or the
        latest matched one anchored there."""
        sink = self.sink
        if sink.checkpointing is not None:
            return sink.checkpointing
        request = sink.request
        return request if request is not None and request.last_node is node else None

    def locked(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node = _arg(args, kwargs, 0, "node")
        req = self._owner(node)
        self.sink.emit(LockEvent, node=NodeId(node.id), rid=Rid(req.rid if req is not None else ""), locked=True)

    def unlocking(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        node = _arg(args, kwargs, 0, "node")
        req = self._owner(node)
        self.sink.emit(LockEvent, node=NodeId(node.id), rid=Rid(req.rid if req is not None else ""), locked=False)

    def finish_begin(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        self.sink.request = _arg(args, kwargs, 0, "req")

    def finish_end(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        req = _arg(args, kwargs, 0, "req")
        if req.finished():
            self.sink.emit(RequestEvent, rid=Rid(req.rid), what="finish")
