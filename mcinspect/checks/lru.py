"""Invariant 10: the mamba LRU list is in access order, so eviction takes the least recently
used state first (MambaRadixCache keeps it as a linked list next to `last_access_time`, and
asserts the two agree only in its debug sanity check: #12007 "Mamba Radix tree sanity check
failed").

Each node in the list names its next less recently used neighbour (`mamba_lru_older`); every
move in the list changes the record of the node now pointing at the moved one, so checking the
changed nodes checks every pair that changed.
"""

from __future__ import annotations

from .history import StepView
from .violation import Violation

LRU = "mamba-lru"


def check_lru_order(view: StepView) -> list[Violation]:
    """Each changed node of the mamba LRU list against its older neighbour: that neighbour is
    in the list, holds a state, and was not accessed after it."""
    nodes = view.state.nodes
    out: list[Violation] = []
    for node in view.changed_nodes:
        if node.mamba_lru_older < 0:
            continue
        older = nodes.get(node.mamba_lru_older)
        if older is None or not older.in_mamba_lru or older.mamba_slot < 0:
            what = "is not in the tree" if older is None else "holds no mamba state" if older.mamba_slot < 0 else "is not in the list"
            reason = f"the mamba LRU list goes from node {node.id} to node {node.mamba_lru_older}, which {what}"
        elif older.last_access > node.last_access:
            reason = (
                f"the mamba LRU list puts node {older.id} (accessed at {older.last_access:.5f}) after node {node.id} "
                f"(accessed at {node.last_access:.5f}): eviction takes node {node.id}'s slot first though node {older.id}'s is older"
            )
        else:
            continue
        slots = tuple(s for s in (node.mamba_slot, older.mamba_slot if older else -1) if s >= 0)
        out.append(Violation(check=LRU, step=view.step, nodes=(node.id, node.mamba_lru_older), slots=slots, reason=reason))
    return out
