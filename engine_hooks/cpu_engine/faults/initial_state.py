"""Faults in the state a prefill starts from: a prefix hit whose suffix runs from a blank state.

#29368 (from #29330, Nemotron-3 Ultra): `Mamba2Metadata` ANDed `has_initial_states` with
`mamba_track_mask`. The mask marks the rows whose extend reaches a checkpoint, so a prefix
hit with a short suffix (mask False) ran its conv and SSM scan from zeros instead of the
state copied into its slot. The cached states and the copy were right; every state the
request produced afterwards, and its output, were wrong.

Each function here is a hook body for sglang's HookRegistry (see `base.Hook`); parameter
names match the sglang method they wrap, since sglang passes some arguments by keyword.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from .base import (
    ALL_FAMILIES,
    EXTRA_BUFFER_STRATEGIES,
    GDN_BACKEND,
    MAMBA2_METADATA,
    MAMBA_RADIX_CACHE,
    REAL_37836,
    RECOMPUTE_CHECK,
    Fault,
    Hook,
    component_hook,
    log_faulty_action,
)

_blank_started: set[str] = set()
"""Requests whose suffix ran from a blank state: every state they cache from then on is wrong."""


def gate_initial_states_by_track_mask(metadata: Any, cls: Any, forward_metadata: Any, chunk_size: int, forward_batch: Any) -> Any:
    """After `Mamba2Metadata.prepare_mixed`: the pre-#29368 gate.

    `has_initial_states = (extend_prefix_lens > 0) & mamba_track_mask`, then
    `prep_initial_states` from the gated value, as the code before #29368 computed them;
    mamba.py then zeroes the SSM initial state and the conv window of the gated rows.
    """
    mixed = metadata.mixed_metadata
    mask = getattr(forward_batch, "mamba_track_mask", None)
    if mixed is None or mask is None:
        return None
    has = mixed.has_initial_states
    gated = has & mask[: has.shape[0]].to(has.device)
    blanked = (has & ~gated).nonzero().flatten().tolist()
    if not blanked:
        return None
    _remember(forward_batch, blanked)
    prep = bool(torch.any(gated[: metadata.num_prefills]))
    metadata.mixed_metadata = dataclasses.replace(
        mixed,
        has_initial_states=gated,
        prep_initial_states=prep,
        chunk_indices=mixed.chunk_indices if prep else None,
        chunk_offsets=mixed.chunk_offsets if prep else None,
    )
    return metadata


def start_short_suffixes_blank(backend: Any, layer: Any, forward_batch: Any, *args: Any, **kwargs: Any) -> None:
    """Before `GDNAttnBackend.forward_extend`: the same gate re-created on the gated delta net.

    GDN's kernels read a row's initial conv window and state straight from its slot (no
    `has_initial_states` to gate), so the rows the pre-#29368 gate would blank (a prefix hit
    whose extend reaches no checkpoint) get their slot's conv window and state zeroed in this
    layer before the kernels run: the suffix runs from a blank state, as on Mamba2.
    """
    mask = getattr(forward_batch, "mamba_track_mask", None)
    if mask is None or forward_batch.forward_mode.is_target_verify():
        return
    prefix = forward_batch.extend_prefix_lens
    blanked = ((prefix > 0) & ~mask[: prefix.shape[0]].to(prefix.device)).nonzero().flatten()
    if blanked.numel() == 0:
        return
    slots = backend.forward_metadata.mamba_cache_indices[blanked].long()
    layer_cache = backend.req_to_token_pool.mamba2_layer_cache(layer.layer_id)
    for conv in layer_cache.conv:
        conv[slots] = 0
    layer_cache.temporal[slots] = 0
    _remember(forward_batch, blanked.tolist())


def log_blank_descendant_cached(component: Any, req: Any, is_finished: bool, insert_result: Any = None, insert_params: Any = None) -> None:
    """Before `MambaComponent.cleanup_after_caching_req`: a request that ran from a blank state
    had a state inserted into the tree. The faulty action logged is this caching, the first
    moment a check can see the run from zeros (its slot and request named); the blanked
    forward itself leaves nothing cached to compare."""
    if req.rid not in _blank_started:
        return
    value = getattr(insert_params, "mamba_value", None)
    if value is not None and insert_result is not None and not insert_result.mamba_exist:
        log_faulty_action("zero-initial-state", slot=int(value.view(-1)[0]), rid=req.rid)
    if is_finished:
        _blank_started.discard(req.rid)


def log_blank_descendant_checkpointed(original: Callable[..., Any], cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    """Around `MambaRadixCache.cache_unfinished_req` (0.5.10-0.5.15: no MambaComponent)."""
    return _log_blank_descendant_inserted(original, cache, req, args, kwargs, finishing=False)


def log_blank_descendant_finished(original: Callable[..., Any], cache: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    """Around `MambaRadixCache.cache_finished_req` (0.5.10-0.5.15)."""
    return _log_blank_descendant_inserted(original, cache, req, args, kwargs, finishing=True)


def _log_blank_descendant_inserted(
    original: Callable[..., Any], cache: Any, req: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, finishing: bool
) -> Any:
    """log_blank_descendant_cached on MambaRadixCache: the state the caching call inserts for a
    request that ran from a blank state (its `insert` names no request: it is seen through an
    instance attribute for the length of the call)."""
    if req.rid not in _blank_started:
        return original(cache, req, *args, **kwargs)
    inserted: list[Any] = []

    def insert(params: Any) -> Any:
        result = type(cache).insert(cache, params)
        if params.mamba_value is not None and not result.mamba_exist:
            inserted.append(params.mamba_value)
        return result

    cache.insert = insert
    try:
        return original(cache, req, *args, **kwargs)
    finally:
        del cache.insert
        for value in inserted:
            log_faulty_action("zero-initial-state", slot=int(value.view(-1)[0]), rid=req.rid)
        if finishing:
            _blank_started.discard(req.rid)


def _remember(forward_batch: Any, rows: list[int]) -> None:
    rids = getattr(forward_batch, "rids", None) or []
    _blank_started.update(rids[row] for row in rows if row < len(rids))


ZERO_INITIAL_STATE = Fault(
    name="zero-initial-state",
    upstream="sgl-project/sglang#29368 (#29330, gate added in #24955)",
    description=(
        "A prefix hit whose suffix reaches no checkpoint (track mask False) runs from a blank "
        "state instead of the state copied into its slot: Mamba2Metadata's has_initial_states "
        "ANDed with mamba_track_mask (nemotron-h, sglang's own code path); on the gated delta "
        "net the same rows' slots are blanked before the kernels. Cached states and the copy "
        "stay right; the request's output and every state it caches later are wrong."
    ),
    expected_checks=(RECOMPUTE_CHECK,),
    strategies=EXTRA_BUFFER_STRATEGIES,
    real_on=REAL_37836,
    families=ALL_FAMILIES,  # Mamba2: sglang's own gate; gated delta net: re-created
    hooks=(
        Hook(f"{MAMBA2_METADATA}.prepare_mixed", "after", gate_initial_states_by_track_mask),
        Hook(f"{GDN_BACKEND}.forward_extend", "before", start_short_suffixes_blank),
        component_hook(
            "cleanup_after_caching_req",
            "before",
            log_blank_descendant_cached,
            mrc=Hook(
                f"{MAMBA_RADIX_CACHE}.cache_unfinished_req",
                "around",
                log_blank_descendant_checkpointed,
                also=(Hook(f"{MAMBA_RADIX_CACHE}.cache_finished_req", "around", log_blank_descendant_finished),),
            ),
        ),
    ),
    trigger="a multi-turn or branch request whose cached prefix is followed by fewer new tokens than "
    "reach the next checkpoint, and which then crosses a checkpoint while decoding (or caches at finish)",
)

FAULTS: tuple[Fault, ...] = (ZERO_INITIAL_STATE,)
