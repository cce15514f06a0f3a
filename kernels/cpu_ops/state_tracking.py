"""Copies of mamba state slots into prefix-cache track slots (extra_buffer decode).

Torch versions of `track_mamba_states_if_needed` / `track_mamba_states_all_layers` from
`sglang/kernels/ops/mamba/mamba_state_scatter_triton.py`, which
`hybrid_linear_attn_backend.py` calls after decode steps: for every batch row i < batch_size
with `mamba_track_mask[i]`, the conv and SSM state rows of slot `cache_indices[i]` are
copied to slot `mamba_track_indices[i]`.
"""

from __future__ import annotations

import torch


def track_mamba_states_if_needed(
    conv_states: torch.Tensor,
    ssm_states: torch.Tensor,
    cache_indices: torch.Tensor,
    mamba_track_mask: torch.Tensor,
    mamba_track_indices: torch.Tensor,
    batch_size: int,
    check_freed_slots: bool = False,
) -> None:
    """Copy tracked rows within one layer's pools ([pool_size, ...] each)."""
    src, dst = _tracked_slots(cache_indices, mamba_track_mask, mamba_track_indices, batch_size, check_freed_slots)
    conv_states[dst] = conv_states[src]
    ssm_states[dst] = ssm_states[src]


def track_mamba_states_all_layers(
    conv_states_pool: torch.Tensor,
    ssm_states_pool: torch.Tensor,
    cache_indices: torch.Tensor,
    mamba_track_mask: torch.Tensor,
    mamba_track_indices: torch.Tensor,
    batch_size: int,
    check_freed_slots: bool = False,
) -> None:
    """Copy tracked rows in every layer of the full [num_layers, pool_size, ...] pools."""
    src, dst = _tracked_slots(cache_indices, mamba_track_mask, mamba_track_indices, batch_size, check_freed_slots)
    conv_states_pool[:, dst] = conv_states_pool[:, src]
    ssm_states_pool[:, dst] = ssm_states_pool[:, src]


def _tracked_slots(
    cache_indices: torch.Tensor,
    mamba_track_mask: torch.Tensor,
    mamba_track_indices: torch.Tensor,
    batch_size: int,
    check_freed_slots: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(source, destination) slots of the tracked rows."""
    tracked = mamba_track_mask[:batch_size].bool()
    src = cache_indices[:batch_size][tracked].long()
    dst = mamba_track_indices[:batch_size][tracked].long()
    live = (src >= 0) & (dst >= 0)
    if check_freed_slots:
        # Only the unified pool frees slots mid-batch (-1); the kernel skips those rows.
        return src[live], dst[live]
    if not bool(live.all()):
        # The Triton kernel would fault here; torch would silently wrap -1 to the last slot.
        raise ValueError("freed slot (-1) among tracked rows, but check_freed_slots is False")
    return src, dst
