"""A fault across tensor-parallel ranks: one rank's bookkeeping drifts from the others'.

Every TP rank runs the same scheduler over the same batches and must make the same cache
decisions; when one rank's allocator, tree or eviction order diverges (a free order that
depends on timing, a retract or abort handled on one rank only), that rank serves its heads'
shard from other slots than rank 0 believes. Nothing crashes; the rank's heads get wrong
states as soon as the ranks disagree on what a slot holds. Re-created in the real allocator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .base import ALL_STRATEGIES, SRT, Fault, Hook, log_faulty_action

MAMBA_ALLOCATOR = SRT + "mem_cache.allocator.mamba.MambaSlotAllocator"
MAMBA_POOL = SRT + "mem_cache.memory_pool.MambaPool"
"""0.5.10-0.5.12: the pool allocates its own slots (`MambaPool.alloc`, the same free list)."""
DESYNCED_RANK = 1
IN_STEP_UNTIL = 16
"""Rank 1's first allocations stay in step with rank 0's: the same run shows the ranks agreeing
before they drift."""
_allocations = [0]


def allocate_from_the_tail_on_one_rank(original: Callable[..., Any], allocator: Any, need_size: int) -> Any:
    """Around `MambaSlotAllocator._do_alloc` (0.5.10-0.5.12: `MambaPool.alloc`): on TP rank 1
    only, hand out the free list's last slots instead of its first: valid slots, consistent
    within the rank, other than rank 0's. The release's own allocation runs (what it does to a
    slot it hands out, e.g. 0.5.12's zeroing), over the free list turned tail first."""
    if _tp_rank() != DESYNCED_RANK or need_size > len(allocator.free_slots) or need_size < 1:
        return original(allocator, need_size)
    _allocations[0] += 1
    if _allocations[0] <= IN_STEP_UNTIL:
        return original(allocator, need_size)
    free = allocator.free_slots
    allocator.free_slots = torch.cat((free[-need_size:], free[:-need_size]))
    taken = original(allocator, need_size)
    log_faulty_action("tp-desync", slot=int(taken[0]))
    return taken


def _tp_rank() -> int:
    """This process's TP rank: `runtime_context.get_parallel()` (0.5.14 on), else the parallel
    state's own getter that it reads (0.5.13 and earlier have no runtime context)."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank

        return get_tensor_model_parallel_rank()
    return get_parallel().tp_rank


TP_DESYNC = Fault(
    name="tp-desync",
    upstream="mcinspect (TP ranks whose cache bookkeeping diverges: issue 12)",
    description=(
        f"TP rank {DESYNCED_RANK}'s mamba allocator takes free slots from the other end of its free list: "
        "every rank stays self-consistent, but rank 1 keeps each state in another slot than rank 0."
    ),
    expected_checks=("tp-agree",),
    strategies=ALL_STRATEGIES,
    hooks=(
        Hook(
            f"{MAMBA_ALLOCATOR}._do_alloc",
            "around",
            allocate_from_the_tail_on_one_rank,
            fallback=Hook(f"{MAMBA_POOL}.alloc", "around", allocate_from_the_tail_on_one_rank),
        ),
    ),
    trigger=f"rank 1's allocations after its first {IN_STEP_UNTIL} (the first waves' requests)",
    requires=("tp",),
)

FAULTS = (TP_DESYNC,)
