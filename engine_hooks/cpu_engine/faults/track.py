"""Faults in what a tracked slot holds and the depth it is credited with.

Each function here is a hook body for sglang's HookRegistry (see `base.Hook`); parameter
names match the sglang method they wrap, since sglang passes some arguments by keyword.
"""

from __future__ import annotations

from itertools import accumulate
from types import SimpleNamespace
from typing import Any

import torch

from ...req_kv import fields_of
from .base import (
    ALL_STRATEGIES,
    EXTRA_BUFFER_STRATEGIES,
    GDN_BACKEND,
    HYBRID_BACKEND_MODULE,
    MAMBA2_BACKEND,
    MAMBA_COMPONENT,
    MAMBA_RADIX_CACHE,
    REAL_37836,
    RECOMPUTE_CHECK,
    TRACK_PLAN,
    Fault,
    Hook,
    component_hook,
    extra_buffer,
    log_faulty_action,
)


def gather_chunk_states_on_the_wrong_grid(
    plan: Any,
    mask: list[bool],
    track_lens: list[int],
    extend_lens: list[int],
    prefix_lens: list[int],
    chunk_size: int,
    *,
    mamba2: bool,
) -> Any:
    """After `build_prefill_track_plan`: index the chunk states `h` on the wrong grid.

    Mamba2 (the real #37836): `h` is ONE chunk grid over the flattened batch, but the
    pre-#37836 `_init_track_ssm_indices` indexed it as if every request had its own grid:
    h_src = sum_{j<i} floor(len_j / chunk) + aligned_i / chunk, for every unaligned tracked
    row (no recompute of off-grid rows). Every request after the first whose predecessors'
    lengths are not chunk multiples caches an earlier flat boundary's state, often another
    request's.

    Gated delta net (the same formula swap, mirrored; GDN itself never had the bug): its
    kernel chunks each request separately (request i's chunk states start at row
    sum_{j<i} ceil(len_j / chunk)); the faulty plan reads row floor((start_i + aligned_i) /
    chunk) instead, the Mamba2 formula.
    """
    starts = list(accumulate(extend_lens, initial=0))
    right = [starts[row] + plan.chunk_indices[row] * chunk_size for row in plan.unaligned_rows]
    if mamba2:
        offsets = list(accumulate((n // chunk_size for n in extend_lens), initial=0))
        plan.h_rows = list(plan.unaligned_rows)
        plan.h_src = [offsets[row] + plan.chunk_indices[row] for row in plan.h_rows]
        plan.recompute_rows, plan.recompute_end_locs = [], []
        read = [src * chunk_size for src in plan.h_src]  # flat positions of the grid rows read
        if read != right:
            log_faulty_action("wrong-chunk-state")
        return plan
    proper = [int(src) for src in plan.h_src]
    plan.h_src = [(starts[row] + plan.chunk_indices[row] * chunk_size) // chunk_size for row in plan.h_rows]
    if plan.h_src != proper:
        log_faulty_action("wrong-chunk-state")
    return plan


def gather_chunk_states_on_the_wrong_grid_at_init(
    indices: tuple[Any, ...], backend: Any, mamba_cache_indices: Any, forward_batch: Any
) -> Any:
    """After `MambaAttnBackendBase._init_track_ssm_indices` (0.5.20: the track plan is not its
    own function yet): the same wrong grid, on the index tuple it returns."""
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import Mamba2AttnBackend

    if len(indices) == 4:  # 0.5.10-0.5.19: (h_src, h_dst, final_src, final_dst)
        # Mamba2's grid there is the pre-#37836 one for real (0.5.16-0.5.19: Fault.real_on)
        return None if isinstance(backend, Mamba2AttnBackend) else _gdn_on_the_mamba2_grid(indices, forward_batch)
    if len(indices) != 9:
        return None

    chunk_idx, h_src, h_dst, rows, final_src, final_dst, seq_idx, end_locs, recompute_dst = indices
    unaligned = rows.tolist()
    if not unaligned:
        return None
    mamba2 = isinstance(backend, Mamba2AttnBackend)
    plan = SimpleNamespace(unaligned_rows=unaligned, chunk_indices=chunk_idx.tolist(), h_rows=unaligned, h_src=h_src.tolist())
    extend_lens = forward_batch.extend_seq_lens.tolist()
    gather_chunk_states_on_the_wrong_grid(plan, [], [], extend_lens, [], backend.mamba_chunk_size, mamba2=mamba2)
    src = torch.tensor(plan.h_src, dtype=h_src.dtype, device=h_src.device)
    if not mamba2:
        return (chunk_idx, src, *indices[2:])
    # every unaligned row read from `h` (none recomputed), into its own track slot
    dst = forward_batch.mamba_track_indices[rows.to(forward_batch.mamba_track_indices.device)].to(h_dst)
    return (chunk_idx, src, dst, rows, final_src, final_dst, seq_idx[:0], end_locs[:0], recompute_dst[:0])


def _gdn_on_the_mamba2_grid(indices: tuple[Any, ...], forward_batch: Any) -> Any:
    """The gated delta net's 4-tuple plan (0.5.10-0.5.19) with its `h` rows read on Mamba2's flat
    grid: request i's chunk states start at sum_{j<i} ceil(len_j / chunk) there (the backend's own
    offsets), the fault reads row floor((start_i + aligned_i) / chunk)."""
    from sglang.srt.layers.attention import hybrid_linear_attn_backend
    from sglang.srt.server_args import get_global_server_args

    h_src, h_dst, final_src, final_dst = indices
    if h_src.numel() == 0:
        return None
    # 0.5.10-0.5.12 chunk by the module's FLA_CHUNK_SIZE; later releases by mamba_cache_chunk_size
    chunk = getattr(hybrid_linear_attn_backend, "FLA_CHUNK_SIZE", None) or get_global_server_args().mamba_cache_chunk_size
    mask = forward_batch.mamba_track_mask.cpu()
    lens = (forward_batch.mamba_track_seqlens.cpu() - forward_batch.extend_prefix_lens.cpu()).tolist()
    rows = [row for row in mask.nonzero().flatten().tolist() if lens[row] % chunk]  # the backend's unaligned rows, in order
    plan = SimpleNamespace(unaligned_rows=rows, chunk_indices=[n // chunk for n in lens])
    plan.h_rows, plan.h_src = rows, h_src.tolist()
    gather_chunk_states_on_the_wrong_grid(plan, [], [], forward_batch.extend_seq_lens.cpu().tolist(), [], chunk, mamba2=False)
    return (torch.tensor(plan.h_src, dtype=h_src.dtype, device=h_src.device), h_dst, final_src, final_dst)


def skip_track_write(*args: Any, **kwargs: Any) -> None:
    """Stands in for the backend's state-tracking copy: the tracked slot is never written (the
    faulty action is logged where the copy had a row to track, not for every forward)."""
    mask = _track_mask(args, kwargs)
    if mask is not None and bool(mask.any()):
        log_faulty_action("unwritten-slot")


def _track_mask(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The copy's track mask: its ForwardBatch's (the backend methods), else the fourth argument
    of `track_mamba_states_if_needed(conv, ssm, cache_indices, mask, ...)`."""
    for arg in args:
        if hasattr(arg, "mamba_track_mask"):
            return arg.mamba_track_mask
    return args[3] if len(args) > 3 else kwargs.get("mamba_track_mask")


def credit_one_page_late(component: Any, req: Any, insert_params: Any, token_ids_len: int, is_finished: bool) -> None:
    """Before `MambaComponent.prepare_for_caching_req`: the tracked seqlen runs one page ahead.

    The slot holds the state at the seqlen the track plan chose; the donation names it
    one page later, so the node it lands on is one page deeper than its state.
    """
    fields = fields_of(req)  # req.kv, or the Req itself before 0.5.19
    if extra_buffer(component) and fields.mamba_last_track_seqlen:
        fields.mamba_last_track_seqlen += component.cache.page_size
        if fields.mamba_last_track_seqlen <= token_ids_len:  # else capped and floored back: harmless
            log_faulty_action("track-off-by-one", rid=req.rid)


def prepare_one_page_short(cache_len: int | None, component: Any, *args: Any, **kwargs: Any) -> int | None:
    """After `MambaComponent.prepare_for_caching_req` where the release has no `floor_cache_len`
    (0.5.19, 0.5.20): the same floor, on the length the component prepared its value for."""
    return None if cache_len is None else floor_one_page_short(component, cache_len)


def _move_tracked_seqlen(fault: str, cache: Any, req: Any, pages: int, cached_len: int) -> None:
    """MambaRadixCache (0.5.10-0.5.15) under extra_buffer: cache_unfinished_req and
    cache_finished_req take the key length straight from `req.mamba_last_track_seqlen` (no
    MambaComponent step to patch), so the fault moves that length by `pages` pages just before
    the cache reads it; the donated slot keeps the state it holds. Only where the key stays within
    the `cached_len` tokens the call caches and keeps at least a page (the cache's own asserts)."""
    seqlen = req.mamba_last_track_seqlen
    if not cache.enable_mamba_extra_buffer or not seqlen:
        return
    moved = seqlen + pages * cache.page_size
    if cache.page_size <= moved <= cached_len:
        req.mamba_last_track_seqlen = moved
        log_faulty_action(fault, rid=req.rid)


def _committed_len(req: Any) -> int:
    """The tokens cache_finished_req caches: its `(origin_input_ids + output_ids)[:kv_committed_len]`."""
    return min(req.kv_committed_len, len(req.origin_input_ids) + len(req.output_ids))


def _fill_len(req: Any) -> int:
    """The tokens cache_unfinished_req caches from: its fill ids (0.5.12: the `fill_ids` field)."""
    return len(req.get_fill_ids() if hasattr(req, "get_fill_ids") else req.fill_ids)


def credit_one_page_late_at_checkpoint(cache: Any, req: Any, chunked: bool = False) -> None:
    """Before `MambaRadixCache.cache_unfinished_req`: track-off-by-one's late credit there."""
    _move_tracked_seqlen("track-off-by-one", cache, req, 1, _fill_len(req))


def credit_one_page_late_at_finish(cache: Any, req: Any, is_insert: bool = True) -> None:
    """Before `MambaRadixCache.cache_finished_req`: track-off-by-one's late credit there."""
    if is_insert:
        _move_tracked_seqlen("track-off-by-one", cache, req, 1, _committed_len(req))


def floor_one_page_short_at_checkpoint(cache: Any, req: Any, chunked: bool = False) -> None:
    """Before `MambaRadixCache.cache_unfinished_req`: depth-mismatch's floor there (the key
    ends a page before the state the donated slot holds; the cache frees the tail's KV itself)."""
    _move_tracked_seqlen("depth-mismatch", cache, req, -1, _fill_len(req))


def floor_one_page_short_at_finish(cache: Any, req: Any, is_insert: bool = True) -> None:
    """Before `MambaRadixCache.cache_finished_req`: depth-mismatch's floor there."""
    if is_insert:
        _move_tracked_seqlen("depth-mismatch", cache, req, -1, _committed_len(req))


def mrc_caching_hook(at_checkpoint: Any, at_finish: Any) -> Hook:
    """Before MambaRadixCache's two caching calls (the one MambaComponent step they stand for)."""
    return Hook(
        f"{MAMBA_RADIX_CACHE}.cache_unfinished_req",
        "before",
        at_checkpoint,
        also=(Hook(f"{MAMBA_RADIX_CACHE}.cache_finished_req", "before", at_finish),),
    )


def floor_one_page_short(component: Any, cache_len: int) -> int:
    """Replaces `MambaComponent.floor_cache_len` (a no-op upstream): the key ends a page early.

    The mamba value prepared for `cache_len` tokens is then stamped on a node one page
    shallower, as when another component (SWA window, DCP page) floors the key below the
    state's depth.
    """
    if cache_len > 0:
        log_faulty_action("depth-mismatch")
    return max(cache_len - component.cache.page_size, 0)


WRONG_CHUNK_STATE = Fault(
    name="wrong-chunk-state",
    upstream="sgl-project/sglang#37836 (#31833, #33450)",
    description=(
        "Prefill tracking of an unaligned checkpoint reads the chunk states `h` on the wrong "
        "grid, so requests after the first in a multi-request prefill cache the state of an "
        "earlier chunk boundary (often another request's). nemotron-h: the real bug, the "
        "pre-#37836 per-request index into Mamba2's flat grid; gated delta net: the formula "
        "swapped the other way. Slot ids, seqlens and depths stay right."
    ),
    expected_checks=(RECOMPUTE_CHECK,),
    strategies=EXTRA_BUFFER_STRATEGIES,
    real_on=REAL_37836,
    hooks=(
        Hook(
            TRACK_PLAN,
            "after",
            gather_chunk_states_on_the_wrong_grid,
            fallback=Hook(
                f"{HYBRID_BACKEND_MODULE}.MambaAttnBackendBase._init_track_ssm_indices",
                "after",
                gather_chunk_states_on_the_wrong_grid_at_init,
            ),
        ),
    ),  # fmt: skip
    trigger="a prefill batch whose second or later request tracks a checkpoint (extend >= 64 tokens) "
    "behind one whose extend is not a multiple of 64: the workload's packed waves, and a chunked "
    "prompt's tail followed by a new prompt",
)

UNWRITTEN_SLOT = Fault(
    name="unwritten-slot",
    upstream="sgl-project/sglang#30862 (#31474)",
    description=(
        "The linear-attention backend never copies the SSM state into the ping-pong track "
        "slot (KDA before #30862 called neither track method), yet the scheduler donates the "
        "slot to the tree: a cached node holds whatever the slot held before. Re-created in "
        "the GDN backend and in the Mamba2 backend (which tracks decodes with the copy itself)."
    ),
    expected_checks=("write-ran", RECOMPUTE_CHECK),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(
        Hook(f"{GDN_BACKEND}._track_mamba_state_extend", "replace", skip_track_write),
        Hook(f"{GDN_BACKEND}._track_mamba_state_decode", "replace", skip_track_write),
        Hook(f"{MAMBA2_BACKEND}._track_mamba_state_extend", "replace", skip_track_write),
        Hook(f"{HYBRID_BACKEND_MODULE}.track_mamba_states_if_needed", "replace", skip_track_write),
    ),
    trigger="every tracked prefill (extend >= 64 tokens): its state is donated right after the prefill",
)

TRACK_OFF_BY_ONE = Fault(
    name="track-off-by-one",
    upstream="sgl-project/sglang#29792 (#31369, #31622, #24590)",
    description=(
        "The seqlen credited to the tracked slot is one step (one page) ahead of the state it "
        "holds, as when decode result processing read kv_committed_len without the overlap "
        "lookahead: the donated state lands on a node one page deeper than its position."
    ),
    expected_checks=("state-depth", RECOMPUTE_CHECK),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(
        component_hook(
            "prepare_for_caching_req",
            "before",
            credit_one_page_late,
            mrc=mrc_caching_hook(credit_one_page_late_at_checkpoint, credit_one_page_late_at_finish),
        ),
    ),  # fmt: skip
    trigger="a donation with at least a page of tokens past the tracked state (shorter keys cap the "
    "credit and floor it back): the last chunk of each chunked prompt, prompts of 80+ fresh tokens",
)

DEPTH_MISMATCH = Fault(
    name="depth-mismatch",
    upstream="sgl-project/sglang#38815 (#39209, #34808, #35412)",
    description=(
        "checkpoint_into_tree floors the key one page below the depth the mamba state was "
        "prepared for (SWA truncation, DCP-widened pages): the state is stamped on a "
        "shallower node, and a hit there replays the missing tokens on top of it."
    ),
    expected_checks=("state-depth", RECOMPUTE_CHECK),
    strategies=ALL_STRATEGIES,
    hooks=(
        Hook(
            f"{MAMBA_COMPONENT}.floor_cache_len",
            "replace",
            floor_one_page_short,
            fallback=component_hook(
                "prepare_for_caching_req",
                "after",
                prepare_one_page_short,
                mrc=mrc_caching_hook(floor_one_page_short_at_checkpoint, floor_one_page_short_at_finish),
            ),
        ),
    ),  # fmt: skip
    trigger="every insert of a mamba state (under no_buffer only a recompute can tell: states carry no planned position); "
    "MambaRadixCache (0.5.10-0.5.15): extra_buffer only (its no_buffer key is the request's whole length, "
    "computed inside cache_finished_req beside the KV it frees)",
)

FAULTS: tuple[Fault, ...] = (WRONG_CHUNK_STATE, UNWRITTEN_SLOT, TRACK_OFF_BY_ONE, DEPTH_MISMATCH)
