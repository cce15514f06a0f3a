"""What a check reports: one broken invariant at one step, with the ids a person jumps to."""

from __future__ import annotations

import msgspec

from ..schema import NodeId, Rid, SlotId, Step


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """One invariant broken at one step (JSON- and msgpack-able, hashable)."""

    check: str
    """Name of the check that found it (a key of `CHECKS`)."""
    step: Step
    """The step boundary at which it was seen."""
    reason: str
    """One line for a person, naming the values: "slot 17 is owned by node 42 (tree) and ..."."""
    nodes: tuple[NodeId, ...] = ()
    slots: tuple[SlotId, ...] = ()
    rids: tuple[Rid, ...] = ()


def name_node(node: NodeId) -> str:
    """How a reason names a tree node; -1 is a node sglang's Rust tree core does not show."""
    return f"node {node}" if node >= 0 else "a tree node off the visible paths"
