"""Faults in a running request's working state that never reach the tree.

A request that took a prefix from the cache continues from a copy of the cached state in its
working slot. If that copy is lost, its output is wrong, yet no cached state is: when the rest
of its run crosses no checkpoint boundary, nothing it computes is ever donated. Only a check
of the working state itself (T2-working-state) sees it; every cached state verifies clean.

Each function here is a hook body for sglang's HookRegistry (see `base.Hook`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...req_kv import kv_of, prefix_len_of
from .base import EXTRA_BUFFER_STRATEGIES, SRT, Fault, Hook, log_faulty_action

SCHEDULE_BATCH = SRT + "managers.schedule_batch.ScheduleBatch"
WORKING_CHECK = "T2-working-state"


def _caches_nothing(req: Any, page_size: int) -> bool:
    """Whether no state the request computes from here on can be donated to the tree: its
    extend is shorter than the prefill checkpoint grid and its decode crosses no track boundary
    (the grids extra_buffer tracks on)."""
    from sglang.srt.server_args import get_global_server_args

    try:
        from sglang.srt import runtime_context
    except ImportError:  # 0.5.13: no runtime_context module; the rules are the ServerArgs fields
        runtime_context = None
    extend_len, extend_end = _extend(req)
    checkpoint_grid = getattr(runtime_context, "mamba_checkpoint_grid", None)
    # 0.5.17: a prefill checkpoints from one mamba_cache_chunk_size on (its ServerArgs property, the page folded in)
    prefill_grid = checkpoint_grid(page_size) if checkpoint_grid is not None else get_global_server_args().mamba_cache_chunk_size
    if extend_len >= prefill_grid:
        return False
    track_grid = getattr(runtime_context, "mamba_track_grid", None)  # 0.5.18: the decode track interval alone
    grid = track_grid(page_size) if track_grid is not None else get_global_server_args().mamba_track_interval
    end = extend_end + int(req.sampling_params.max_new_tokens or 0)
    return end // grid == extend_end // grid


def _extend(req: Any) -> tuple[int, int]:
    """(extend length, extend end) of the request's current extend (0.5.21: its `extend_range`;
    0.5.13-0.5.14: `extend_input_len` past the prefix)."""
    if hasattr(req, "extend_range"):
        return req.extend_range.length, req.extend_range.end
    if hasattr(req, "extend_len"):
        return req.extend_len, req.extend_end
    return req.extend_input_len, prefix_len_of(req) + req.extend_input_len  # 0.5.13-0.5.14: after the cached prefix


def drop_copy_on_write(original: Callable[..., Any], batch: Any, reqs: Any) -> Any:
    """Around `ScheduleBatch._collect_deferred_mamba_cow_and_clear`: the copy-on-write of a
    prefix-hit request that caches nothing afterwards is collected from the request (its
    `mamba_cow_src_index` consumed, its clear cancelled) but never handed to the forward, as when
    the deferred copy is not carried to the next forward (#24954): the working slot keeps what
    its previous owner left there."""
    page = batch.tree_cache.page_size
    victims = [r for r in reqs if kv_of(r).mamba_cow_src_index is not None and prefix_len_of(r) > 0 and _caches_nothing(r, page)]
    result = original(batch, reqs)
    if not victims or batch.mamba_cow_dst_indices is None:
        return result
    lost = {int(kv_of(r).mamba_pool_idx) for r in victims}
    keep = [i for i, dst in enumerate(batch.mamba_cow_dst_indices.tolist()) if dst not in lost]
    if len(keep) == batch.mamba_cow_dst_indices.numel():
        return result
    if keep:
        batch.mamba_cow_src_indices = batch.mamba_cow_src_indices[keep]
        batch.mamba_cow_dst_indices = batch.mamba_cow_dst_indices[keep]
    else:
        batch.mamba_cow_src_indices = batch.mamba_cow_dst_indices = None
    for req in victims:
        log_faulty_action("dropped-cow", slot=int(kv_of(req).mamba_pool_idx), rid=req.rid)
    return result


DROPPED_COW = Fault(
    name="dropped-cow",
    upstream="sgl-project/sglang#24954 (deferred copy-on-write not carried to the forward)",
    description=(
        "The deferred copy-on-write of a prefix-hit request is consumed by the scheduler but "
        "never executed by the forward: the request continues from a stale working slot. Only "
        "requests whose remaining run caches nothing are hit, so every cached state stays right "
        "and only their outputs are wrong."
    ),
    expected_checks=("cow-ran", WORKING_CHECK),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{SCHEDULE_BATCH}._collect_deferred_mamba_cow_and_clear", "around", drop_copy_on_write),),
    trigger="prefix hits with a short suffix (the workload's branches and shared-prefix requests)",
)

FAULTS: tuple[Fault, ...] = (DROPPED_COW,)
