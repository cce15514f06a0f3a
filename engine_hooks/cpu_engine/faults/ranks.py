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

from .base import ALL_STRATEGIES, SRT, Fault, Hook, log_faulty_action

MAMBA_ALLOCATOR = SRT + "mem_cache.allocator.mamba.MambaSlotAllocator"
DESYNCED_RANK = 1
IN_STEP_UNTIL = 16
"""Rank 1's first allocations stay in step with rank 0's: the same run shows the ranks agreeing
before they drift."""
_allocations = [0]


def allocate_from_the_tail_on_one_rank(original: Callable[..., Any], allocator: Any, need_size: int) -> Any:
    """Around `MambaSlotAllocator._do_alloc`: on TP rank 1 only, hand out the free list's last
    slots instead of its first: valid slots, consistent within the rank, other than rank 0's."""
    from sglang.srt.runtime_context import get_parallel

    if get_parallel().tp_rank != DESYNCED_RANK or need_size > len(allocator.free_slots) or need_size < 1:
        return original(allocator, need_size)
    _allocations[0] += 1
    if _allocations[0] <= IN_STEP_UNTIL:
        return original(allocator, need_size)
    taken = allocator.free_slots[-need_size:]
    allocator.free_slots = allocator.free_slots[:-need_size]
    log_faulty_action("tp-desync", slot=int(taken[0]))
    return taken


TP_DESYNC = Fault(
    name="tp-desync",
    upstream="mcinspect (TP ranks whose cache bookkeeping diverges: issue 12)",
    description=(
        f"TP rank {DESYNCED_RANK}'s mamba allocator takes free slots from the other end of its free list: "
        "every rank stays self-consistent, but rank 1 keeps each state in another slot than rank 0."
    ),
    expected_checks=("tp-agree",),
    strategies=ALL_STRATEGIES,
    hooks=(Hook(f"{MAMBA_ALLOCATOR}._do_alloc", "around", allocate_from_the_tail_on_one_rank),),
    trigger=f"rank 1's allocations after its first {IN_STEP_UNTIL} (the first waves' requests)",
    requires=("tp",),
)

FAULTS = (TP_DESYNC,)
