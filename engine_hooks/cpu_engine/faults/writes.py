"""Faults in the track writes a forward runs: planned but never run, or run into another slot.

Each re-creates an upstream bug's mechanism in the real sglang 0.5.23 code path the embedded
engine runs: the scheduler plans and stamps the write as usual, the forward's state-tracking copy
gets other destinations (or none), and the slot is donated anyway. The checks of what the forward
ran (write-ran, write-target) see it at the step; the recompute (T2) and the fingerprints (T1)
see the wrong content later.

Each function here is a hook body for sglang's HookRegistry (see `base.Hook`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...req_kv import prefill_track_mask
from .base import EXTRA_BUFFER_STRATEGIES, HYBRID_BACKEND_MODULE, RECOMPUTE_CHECK, SRT, Fault, Hook, log_faulty_action

SCHEDULE_BATCH = SRT + "managers.schedule_batch.ScheduleBatch"
BACKEND = HYBRID_BACKEND_MODULE + ".MambaAttnBackendBase"
TRACK_FIELDS = ("mamba_track_indices", "mamba_track_mask", "mamba_track_seqlens", "mamba_prefill_track_mask_cpu", "mamba_track_seqlens_cpu")

_stale: list[torch.Tensor] = []
"""stray-track-write: the destinations of the previous tracked extend forward."""


def drop_track_fields_on_merge(original: Callable[..., Any], batch: Any, running_batch: Any, *args: Any, **kwargs: Any) -> Any:
    """Around `ScheduleBatch.mix_with_running`: the merged batch loses its track fields, as when
    `merge_batch` set them to None after `prepare_for_extend` had stamped the prefill rows' track
    slots (#24613, again #39342): the mixed forward tracks nothing, the slots are donated."""
    result = original(batch, running_batch, *args, **kwargs)
    mask = prefill_track_mask(batch)
    if mask and any(mask):
        for req, tracked in zip(batch.reqs, mask):
            if tracked:
                log_faulty_action("mixed-track-dropped", rid=req.rid)
        for name in TRACK_FIELDS:
            setattr(batch, name, None)
    return result


def bind_the_padding_tail(metadata: Any, backend: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
    """After `MambaAttnBackendBase._forward_metadata` of a decode forward: the destinations
    handed to the track copy are the zeroed tail of a static buffer, not the rows refreshed for
    this batch (#32555: `[-num_decodes:]` of the graph buffer instead of `[:bs]`). The copy writes
    the padding slot 0; the planned slot keeps its old content and is donated."""
    tracked = getattr(forward_batch, "mamba_track_mask", None)
    # 0.5.10-0.5.14 hand the copy the batch's own indices (their metadata has no mamba_track_indices)
    handed = metadata if hasattr(metadata, "mamba_track_indices") else forward_batch
    if not forward_batch.forward_mode.is_decode() or tracked is None or handed.mamba_track_indices is None:
        return metadata
    if bool(tracked.any()):
        log_faulty_action("decode-write-to-padding")
        handed.mamba_track_indices = torch.zeros_like(handed.mamba_track_indices)
    return metadata


def scatter_into_a_stale_row(metadata: Any, backend: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> Any:
    """After `MambaAttnBackendBase._forward_metadata` of an extend forward that tracks: the copy's
    destinations keep a row of the previous tracked forward (#34184: rows past the live batch,
    left in the buffers by an earlier replay), so this forward's first tracked state is also
    scattered into a slot an earlier request wrote, which the tree has usually cached since."""
    pairs = [("track_ssm_h_dst", "track_ssm_h_src"), ("track_ssm_final_dst", "track_ssm_final_src")]
    present = [(dst, src) for dst, src in pairs if getattr(metadata, dst, None) is not None and getattr(metadata, dst).numel()]
    if not forward_batch.forward_mode.is_extend() or not present:
        return metadata
    dst_name, src_name = present[0]
    dst, src = getattr(metadata, dst_name), getattr(metadata, src_name)
    stale, _stale[:] = (_stale[0] if _stale else None), [dst[:1].clone()]
    if stale is None or bool((stale == dst).any()):
        return metadata
    setattr(metadata, dst_name, torch.cat([dst, stale]))
    setattr(metadata, src_name, torch.cat([src, src[:1]]))
    batch_src = getattr(metadata, "track_ssm_h_batch_src", None)  # 0.5.20+; none in 0.5.13-0.5.15 and 0.5.19
    if dst_name == "track_ssm_h_dst" and batch_src is not None:
        metadata.track_ssm_h_batch_src = torch.cat([batch_src, batch_src[:1]])
    log_faulty_action("stray-track-write", slot=int(stale[0]))
    return metadata


MIXED_TRACK_DROPPED = Fault(
    name="mixed-track-dropped",
    upstream="sgl-project/sglang#24613 (#22876, recurred as #39342 / #39526)",
    description=(
        "With --enable-mixed-chunk, mix_with_running drops the batch's track fields after "
        "prepare_for_extend stamped the prefill rows' track slots: the mixed forward writes no "
        "track state, and the stamped slots are donated holding whatever they held."
    ),
    expected_checks=("write-ran", RECOMPUTE_CHECK),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{SCHEDULE_BATCH}.mix_with_running", "around", drop_track_fields_on_merge),),
    trigger="a tracked prefill chunk (64+ new tokens) mixed into running decodes (demo --mixed-chunk)",
    requires=("mixed-chunk",),
)

DECODE_WRITE_TO_PADDING = Fault(
    name="decode-write-to-padding",
    upstream="sgl-project/sglang#32555",
    description=(
        "The decode track copy is handed the zeroed tail of the destination buffer instead of "
        "this batch's rows: the state at a decode checkpoint goes to the padding slot 0, the "
        "planned ping-pong slot is never written and is donated anyway."
    ),
    expected_checks=("write-ran", RECOMPUTE_CHECK),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{BACKEND}._forward_metadata", "after", bind_the_padding_tail),),
    trigger="a decode step crossing a track boundary (every 64 tokens in the embedded engine)",
)

STRAY_TRACK_WRITE = Fault(
    name="stray-track-write",
    upstream="sgl-project/sglang#34184",
    description=(
        "An extend forward's track copy keeps a stale destination row of the previous tracked "
        "forward: its state is also scattered into a slot an earlier request wrote, usually "
        "cached by the tree since, so a cached state changes under its node."
    ),
    expected_checks=("write-target", "content-immutable"),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{BACKEND}._forward_metadata", "after", scatter_into_a_stale_row),),
    trigger="every tracked extend forward after the first",
)

FAULTS: tuple[Fault, ...] = (MIXED_TRACK_DROPPED, DECODE_WRITE_TO_PADDING, STRAY_TRACK_WRITE)
