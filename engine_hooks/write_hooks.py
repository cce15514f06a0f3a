"""What the forward really wrote: the state-tracking copies as the model forward ran them.

The scheduler's plans (TrackPlanEvent) say where a state should go; these hooks read, inside
the forward, the destinations the state-tracking copy used and emit one `TrackWriteEvent` per
forward. A planned write that never ran (a backend that skips the copy, #30862; track fields
dropped by a merge, #24613; a graph bound to another buffer, #32555) shows as a planned
destination missing from `written`; a copy into a slot nobody planned (#34184) as a stray one.

| sglang 0.5.23 method | hook | what mcinspect does |
|---|---|---|
| `managers.schedule_batch.ScheduleBatch.prepare_for_extend`, `.prepare_for_decode`, `.mix_with_running` | after, observed | which request holds each req_to_token row, the position its track write is for |
| `layers.attention.hybrid_linear_attn_backend.MambaAttnBackendBase._track_mamba_state_extend` | before, observed | extend / mixed forward: its copy's destination slots (`track_ssm_*_dst`), the batch's planned ones |
| `...MambaAttnBackendBase._track_mamba_state_decode` | before, observed | decode forward: the destinations bound for the copy (`forward_metadata.mamba_track_indices`, the graph's static buffer under CUDA graphs) for the rows in the mask |

Each copy function runs once per mamba layer of a forward with the same destinations: the
event is built at the first call of each forward. Slot ids stay tensors until the step boundary
(EventSink's deferred conversion), so no hook syncs the device. Not seen: forwards replayed
from a CUDA graph (the copy is recorded in the graph and its Python function does not run).
"""

from __future__ import annotations

from typing import Any

import torch

from mcinspect.schema import Rid, TrackWriteEvent

from .event_sink import DeferredSlots, DeferredValues, EventSink
from .reference import RID_PREFIX

_SRT = "sglang.srt."
SCHEDULE_BATCH = _SRT + "managers.schedule_batch.ScheduleBatch"
BACKEND = _SRT + "layers.attention.hybrid_linear_attn_backend.MambaAttnBackendBase"


class WriteHooks:
    """Hook bodies (guarded and observed-only in events.hook_points)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self._rows: dict[int, tuple[Rid, int]] = {}
        """req_to_token row -> (request, position its next track write is for; -1: untracked)."""
        self._decode_rows: list[tuple[Rid, int, bool]] = []
        """The decode batch prepared last, row by row: (request, position, tracked by its CPU
        mask). Its forward runs next, in the same row order (decode forward batches carry no
        CPU copy of their rows)."""
        self._last: Any = None
        """The forward batch whose event was built (the copies run once per mamba layer)."""

    # --- who holds each row (scheduling) ---

    def extend_prepared(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mask = getattr(batch, "mamba_prefill_track_mask_cpu", None) or [False] * len(batch.reqs)
        for req, tracked in zip(batch.reqs, mask):
            seqlen = req.kv.mamba_last_track_seqlen
            self._own(req, int(seqlen) if tracked and seqlen is not None else -1)

    def decode_prepared(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mask = getattr(batch, "mamba_track_mask_cpu", None) or [False] * len(batch.reqs)
        lens = batch.seq_lens_cpu.tolist() if getattr(batch, "seq_lens_cpu", None) is not None else [-1] * len(batch.reqs)
        self._decode_rows = []
        for req, tracked, seqlen in zip(batch.reqs, mask, lens):
            position = int(seqlen) if tracked else -1
            self._own(req, position)
            rid = Rid("" if req.rid.startswith(RID_PREFIX) else req.rid)
            self._decode_rows.append((rid, position, bool(tracked)))

    def mixed(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        """After mix_with_running: the decode rows joined the extend batch (their requests are
        known from prepare_for_decode; a mixed step tracks only the prefill rows)."""
        for req in batch.reqs:
            if req.kv.req_pool_idx not in self._rows:
                self._own(req, -1)

    def _own(self, req: Any, position: int) -> None:
        row = req.kv.req_pool_idx
        if row is not None and not req.rid.startswith(RID_PREFIX):
            self._rows[int(row)] = (Rid(req.rid), position)

    # --- what the forward ran ---

    def extend_tracked(self, backend: Any, forward_batch: Any, h: Any, ssm_states: Any, forward_metadata: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before _track_mamba_state_extend: the copy writes `track_ssm_*_dst`."""
        if forward_batch is self._last:
            return
        self._last = forward_batch
        rows = self._batch_rows(forward_batch)
        if rows is None:
            return
        dst = [t for t in (forward_metadata.track_ssm_h_dst, forward_metadata.track_ssm_final_dst, forward_metadata.track_ssm_recompute_dst) if t is not None and t.numel()]
        mask = forward_batch.mamba_prefill_track_mask_cpu
        self._emit(forward_batch, rows, DeferredValues([forward_batch.mamba_track_mask], cast=bool) if mask is None else list(mask), dst)

    def decode_tracked(self, backend: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> None:
        """Before _track_mamba_state_decode: the copy writes `forward_metadata.mamba_track_indices`
        of the rows in the batch's mask."""
        if forward_batch is self._last or forward_batch.mamba_track_mask is None:
            return
        self._last = forward_batch
        rows = self._decode_rows
        bound = getattr(backend.forward_metadata, "mamba_track_indices", None)
        if bound is None or len(rows) != forward_batch.batch_size:
            return
        tracked = [i for i, (_, _, on) in enumerate(rows) if on]
        if not tracked:  # no row at a checkpoint boundary: the copy writes nothing
            return
        written = [bound[torch.tensor(tracked, dtype=torch.int64).to(bound.device)]]
        self._event(forward_batch, [(rid, position) for rid, position, _ in rows], [on for *_, on in rows], written)

    def _batch_rows(self, forward_batch: Any) -> list[int] | None:
        rows = getattr(forward_batch, "req_pool_indices_cpu", None)
        if rows is None:
            return None
        return [int(r) for r in rows.tolist()[: forward_batch.batch_size]]

    def _emit(self, forward_batch: Any, rows: list[int], mask: Any, written: list[Any]) -> None:
        self._event(forward_batch, [self._rows.get(row, (Rid(""), -1)) for row in rows], mask, written)

    def _event(self, forward_batch: Any, owners: list[tuple[Rid, int]], mask: Any, written: list[Any]) -> None:
        mode = forward_batch.forward_mode
        forward = "mixed" if mode.is_mixed() else "decode" if mode.is_decode() else "extend"
        planned = forward_batch.mamba_track_indices
        self.sink.emit(
            TrackWriteEvent,
            forward=forward,
            rids=[rid for rid, _ in owners],
            mask=mask,
            planned=DeferredSlots([planned[: len(owners)].clone() if planned is not None else None]),
            positions=[position for _, position in owners],
            written=DeferredSlots([t.clone() for t in written]),
        )


def write_hook_points(hooks: WriteHooks) -> list[tuple[str, str, Any]]:
    """(target, "before" | "after", body), all observed-only."""
    return [
        (f"{SCHEDULE_BATCH}.prepare_for_extend", "after", hooks.extend_prepared),
        (f"{SCHEDULE_BATCH}.prepare_for_decode", "after", hooks.decode_prepared),
        (f"{SCHEDULE_BATCH}.mix_with_running", "after", hooks.mixed),
        (f"{BACKEND}._track_mamba_state_extend", "before", hooks.extend_tracked),
        (f"{BACKEND}._track_mamba_state_decode", "before", hooks.decode_tracked),
    ]
