"""What the forward really wrote: the state-tracking copies as the model forward ran them.

The scheduler's plans (TrackPlanEvent) say where a state should go; these hooks read, inside
the forward, the destinations the state-tracking copy used and emit one `TrackWriteEvent` per
forward. A planned write that never ran (a backend that skips the copy, #30862; track fields
dropped by a merge, #24613; a graph bound to another buffer, #32555) shows as a planned
destination missing from `written`; a copy into a slot nobody planned (#34184) as a stray one.

Targets: the `write` rows of `hooks_0523.HOOKS`.

Each copy function runs once per mamba layer of a forward with the same destinations: the
event is built at the first call of each forward (of each decode batch prepared). Slot ids are
kept as they are now (`tensor_runs.kept`: ints on the host, device copies read at the step
boundary), so no hook syncs the device. Not seen: forwards replayed from a CUDA graph (the copy
is recorded in the graph and its Python function does not run).
"""

from __future__ import annotations

from typing import Any

from mcinspect.schema import Rid, TrackWriteEvent

from .event_sink import DeferredSlots, DeferredValues, EventSink
from .reference import RID_PREFIX
from .req_kv import decode_track_mask, kv_of, prefill_track_mask
from .tensor_runs import kept


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
        self._decode_planned: Any = None
        """That batch's planned destinations (`mamba_track_indices`, on the device)."""
        self._decode_mode = "decode"
        self._decode_emitted = True
        self._last: Any = None
        """The forward batch whose event was built (the copies run once per mamba layer)."""

    # --- who holds each row (scheduling) ---

    def extend_prepared(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mask = prefill_track_mask(batch) or [False] * len(batch.reqs)
        for req, tracked in zip(batch.reqs, mask):
            seqlen = kv_of(req).mamba_last_track_seqlen
            self._own(req, int(seqlen) if tracked and seqlen is not None else -1)

    def decode_prepared(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mask = decode_track_mask(batch) or [False] * len(batch.reqs)
        lens = batch.seq_lens_cpu.tolist() if getattr(batch, "seq_lens_cpu", None) is not None else [-1] * len(batch.reqs)
        self._decode_rows = []
        planned = getattr(batch, "mamba_track_indices", None)
        # Kept only for a batch with a tracked row: decode_copied makes no event otherwise.
        self._decode_planned = kept(planned) if planned is not None and any(mask) else None
        self._decode_mode = "decode"
        self._decode_emitted = False
        for req, tracked, seqlen in zip(batch.reqs, mask, lens):
            position = int(seqlen) if tracked else -1
            self._own(req, position)
            rid = Rid("" if req.rid.startswith(RID_PREFIX) else req.rid)
            self._decode_rows.append((rid, position, bool(tracked)))

    def mixed(self, ret: Any, batch: Any, /, *args: Any, **kwargs: Any) -> None:
        """After mix_with_running: the decode rows joined the extend batch (their requests are
        known from prepare_for_decode; a mixed step tracks only the prefill rows)."""
        for req in batch.reqs:
            if kv_of(req).req_pool_idx not in self._rows:
                self._own(req, -1)
        self._decode_mode = "mixed"  # the decode tail rides this extend forward

    def _own(self, req: Any, position: int) -> None:
        row = kv_of(req).req_pool_idx
        if row is not None and not req.rid.startswith(RID_PREFIX):
            self._rows[int(row)] = (Rid(req.rid), position)

    # --- what the forward ran ---

    def extend_tracked(
        self, backend: Any, forward_batch: Any, h: Any, ssm_states: Any, forward_metadata: Any, /, *args: Any, **kwargs: Any
    ) -> None:
        """Before _track_mamba_state_extend: the copy writes `track_ssm_*_dst`."""
        if forward_batch is self._last:
            return
        self._last = forward_batch
        rows = self._batch_rows(forward_batch)
        if rows is None:
            return
        # 0.5.19 has no off-grid recompute (no track_ssm_recompute_dst)
        named = ("track_ssm_h_dst", "track_ssm_final_dst", "track_ssm_recompute_dst")
        dst = [t for t in (getattr(forward_metadata, name, None) for name in named) if t is not None and t.numel()]
        listed = getattr(forward_batch, "mamba_prefill_track_mask_cpu", None)
        device = getattr(forward_batch, "mamba_track_mask", None)
        if listed is not None:
            mask: Any = list(listed)
        elif device is not None:  # 0.5.20: the device mask alone, copied now (a later batch overwrites its storage)
            mask = DeferredValues([kept(device)], cast=bool)
        else:  # no mask at all (0.5.16's merge_batch drops it, #24613): the copy writes no row
            mask = [False] * len(rows)
        self._emit(forward_batch, rows, mask, dst)

    def decode_copied(self, conv: Any, ssm: Any, cache_indices: Any, mask: Any, dst: Any, bs: int, /, *args: Any, **kwargs: Any) -> None:
        """Before track_mamba_states_if_needed / _all_layers: the copy writes `dst[i]` for the
        rows in `mask` (the decode rows of the batch prepared last, in its order)."""
        rows = self._decode_rows
        if self._decode_emitted or len(rows) != int(bs):
            return
        self._decode_emitted = True
        if not any(on for *_, on in rows):  # the scheduler tracks no row here: nothing to copy
            return
        self.sink.emit(
            TrackWriteEvent,
            forward=self._decode_mode,
            rids=[rid for rid, _, _ in rows],
            mask=DeferredValues([kept(mask, len(rows))], cast=bool),
            planned=DeferredSlots([self._decode_planned[: len(rows)] if self._decode_planned is not None else None]),
            positions=[position for _, position, _ in rows],
            written=[],
            bound=DeferredSlots([kept(dst, len(rows))]),
        )

    def _batch_rows(self, forward_batch: Any) -> list[int] | None:
        rows = getattr(forward_batch, "req_pool_indices_cpu", None)
        if rows is None:  # 0.5.20: the device tensor alone (one host copy per forward)
            rows = getattr(forward_batch, "req_pool_indices", None)
        if rows is None:
            return None
        return [int(r) for r in rows.tolist()[: forward_batch.batch_size]]

    def _emit(self, forward_batch: Any, rows: list[int], mask: Any, written: list[Any]) -> None:
        owners = [self._rows.get(row, (Rid(""), -1)) for row in rows]
        mode = forward_batch.forward_mode
        forward = "mixed" if mode.is_mixed() else "decode" if mode.is_decode() else "extend"
        planned = forward_batch.mamba_track_indices
        self.sink.emit(
            TrackWriteEvent,
            forward=forward,
            rids=[rid for rid, _ in owners],
            mask=mask,
            planned=DeferredSlots([kept(planned, len(owners)) if planned is not None else None]),
            positions=[position for _, position in owners],
            written=DeferredSlots([kept(t) for t in written]),
        )
