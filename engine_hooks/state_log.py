"""Where each cached state came from: its prefix tokens and the forward that wrote it, recorded
by hooks when the state enters the tree (both tree cores: the insert hook is Python code on
either), for the verifier.

| sglang 0.5.23 method | hook | what is recorded |
|---|---|---|
| `mem_cache.unified_cache.components.mamba.MambaComponent.cleanup_after_caching_req` | before | a state entered the tree: slot, node, the prefix's token ids (the insert's key) |
| `managers.schedule_batch.ScheduleBatch.prepare_for_extend` | after | the extend batch's track plans: request, slot, position, batch size, index, extend lengths |
| `managers.schedule_batch.ScheduleBatch.prepare_for_decode` | after | a decode batch's track plans at checkpoint boundaries |
| `managers.schedule_batch.ScheduleBatch._collect_deferred_mamba_cow_and_clear`, `.mix_with_running` | before / after | counts only: prefix hits copied, mixed batches |

It also counts which cache paths ran (`paths`: prefill and decode checkpoints, chunk and finish
donations, copy-on-writes, mixed batches), for the demo's summary and `mcinspect info`.

The hooks keep slot ids as tensors (a device read in a hook would wait for the forward in
flight) and `drain` turns them into ints once per step boundary. Prefix tokens are copied at
insert (int32); the verifier bounds how many it keeps.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from mcinspect.schema import BatchOrigin, NodeId, Rid, SlotId, Step

from .reference import RID_PREFIX
from .req_kv import decode_track_entries, decode_track_mask, key_tokens, kv_of, prefill_track_mask
from .tensor_runs import IndexValue, ints_of_many, kept

PATHS = ("prefill checkpoint", "decode checkpoint", "chunk donation", "finish donation", "copy-on-write", "mixed batch")
"""The cache paths counted: a prefill or a decode step writing a track state, a state donated
by a request still running (chunked prefill) or finishing, a prefix hit's copy, a mixed batch."""
MAX_ORIGINS = 4096
"""Track plans remembered (per request and slot) until the insert that donates the slot."""


@dataclass(eq=False)
class CachedState:
    """A state the tree holds, as the insert saw it (compared by identity)."""

    slot: SlotId
    node: NodeId
    tokens: array | None
    """The prefix from the root to the node's end (int32); None once given up (verifier.MAX_TOKENS)."""
    step: Step
    """The first boundary after the insert."""
    rid: Rid
    origin: BatchOrigin | None


@dataclass
class _Plan:
    slot: IndexValue
    rid: Rid
    forward: str
    batch_size: int
    position: int
    extend_lens: list[int]
    seqlen: int


@dataclass
class _Insert:
    slot: IndexValue
    node: int
    tokens: array
    rid: Rid
    donated: bool


class StateLog:
    """Filled by the hooks (scheduler thread), drained at each step boundary by the verifier."""

    def __init__(self) -> None:
        self._plans: list[_Plan] = []
        self._inserts: list[_Insert] = []
        self._origins: OrderedDict[tuple[str, int], BatchOrigin] = OrderedDict()
        self.paths: dict[str, int] = dict.fromkeys(PATHS, 0)
        """How often each cache path ran (PATHS)."""

    # --- hook bodies (guarded by the plugin) ---

    def extend_planned(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        """After ScheduleBatch.prepare_for_extend: the requests whose forward writes a track slot."""
        mask = prefill_track_mask(batch)
        if not mask or True not in mask:
            return
        lens = list(batch.extend_lens)
        for i, (req, tracked) in enumerate(zip(batch.reqs, mask)):
            kv = kv_of(req)
            if tracked and not req.rid.startswith(RID_PREFIX):
                self.paths["prefill checkpoint"] += 1
            if (
                tracked
                and not req.rid.startswith(RID_PREFIX)
                and kv.mamba_ping_pong_track_buffer is not None
                and kv.mamba_last_track_idx is not None
            ):
                slot = kept(kv.mamba_ping_pong_track_buffer[kv.mamba_last_track_idx])
                seqlen = -1 if kv.mamba_last_track_seqlen is None else int(kv.mamba_last_track_seqlen)
                self._plans.append(_Plan(slot, Rid(req.rid), "extend", len(batch.reqs), i, lens, seqlen))

    def decode_planned(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        """After ScheduleBatch.prepare_for_decode: requests at a checkpoint boundary."""
        mask = decode_track_mask(batch)
        if not mask or True not in mask:
            return
        rows = zip(batch.reqs, mask, decode_track_entries(batch), batch.seq_lens_cpu.tolist())
        for i, (req, at_boundary, position, seqlen) in enumerate(rows):
            buffer = kv_of(req).mamba_ping_pong_track_buffer
            if at_boundary and buffer is not None:
                self.paths["decode checkpoint"] += 1
                self._plans.append(_Plan(kept(buffer[position]), Rid(req.rid), "decode", len(batch.reqs), i, [], int(seqlen)))

    def inserting(self, component: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before MambaComponent.cleanup_after_caching_req: a state just entered the tree."""
        req = args[0] if args else kwargs.get("req")
        is_finished = args[1] if len(args) > 1 else kwargs.get("is_finished")
        result = args[2] if len(args) > 2 else kwargs.get("insert_result")
        params = args[3] if len(args) > 3 else kwargs.get("insert_params")
        if result is None or result.mamba_exist or params is None or params.mamba_value is None or params.key is None:
            return
        donated = bool(component.cache.enable_mamba_extra_buffer) and component.int8_ckpt_pool is None
        self.inserted(params.mamba_value, int(result.last_device_node), params.key, Rid(req.rid), donated, bool(is_finished))

    def inserted(self, slot: IndexValue, node: int, key: Any, rid: Rid, donated: bool, finished: bool) -> None:
        """A state entered the tree at `node` under the insert's `key` (a RadixKey); `donated`:
        a ping-pong slot (extra_buffer), else the working slot (no_buffer). Each generation's
        insert hook calls this (MambaRadixCache: events_mrc)."""
        self.paths["finish donation" if finished else "chunk donation"] += 1
        self._inserts.append(_Insert(slot, node, array("i", key_tokens(key)), rid, donated))

    def collecting_copies(self, batch: Any, reqs: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before ScheduleBatch._collect_deferred_mamba_cow_and_clear: prefix hits to copy."""
        self.paths["copy-on-write"] += sum(1 for req in reqs if kv_of(req).mamba_cow_src_index is not None)

    def mixed(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        """After ScheduleBatch.mix_with_running."""
        self.paths["mixed batch"] += 1

    # --- at the step boundary ---

    def drain(self, step: Step) -> list[CachedState]:
        """The states inserted since the last drain, with their origins (one device copy)."""
        if not self._plans and not self._inserts:  # most steps: nothing to take in, nothing to allocate
            return []
        plans, self._plans = self._plans, []
        inserts, self._inserts = self._inserts, []
        ints = ints_of_many([p.slot for p in plans] + [i.slot for i in inserts])
        for plan, slot in zip(plans, ints[: len(plans)]):
            if slot:
                origin = BatchOrigin(
                    plan.rid,
                    step,
                    plan.forward,
                    plan.batch_size,
                    plan.position,
                    plan.extend_lens,
                    plan.seqlen,  # type: ignore[arg-type]
                )
                self._remember((plan.rid, slot[0]), origin)
        out = []
        for insert, slot in zip(inserts, ints[len(plans) :]):
            if not slot:
                continue
            origin = self._origins.get((insert.rid, slot[0])) if insert.donated else None
            if origin is None and not insert.donated:  # no_buffer: the working slot, cached at the end
                origin = BatchOrigin(insert.rid, step, "finish", -1, -1, [], len(insert.tokens))
            out.append(CachedState(SlotId(slot[0]), NodeId(insert.node), insert.tokens, step, insert.rid, origin))
        return out

    def _remember(self, key: tuple[str, int], origin: BatchOrigin) -> None:
        self._origins[key] = origin
        self._origins.move_to_end(key)
        while len(self._origins) > MAX_ORIGINS:
            self._origins.popitem(last=False)
