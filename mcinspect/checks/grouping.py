"""Violations grouped by cause: the same check on the same slots and nodes, step after step, is
one finding (a double owner left in place is seen at every boundary until it goes away).

A group keeps its first occurrence's reason, the steps it spans, how often it was seen and
every id it touched; grouping is one dict lookup per violation (100k violations: linear).
"""

from __future__ import annotations

import msgspec

from ..schema import NodeId, Rid, SlotId, Step
from .violation import Violation

Cause = tuple[str, tuple[SlotId, ...], tuple[NodeId, ...], tuple[Rid, ...]]


class ViolationGroup(msgspec.Struct, kw_only=True):
    """One cause: its first occurrence and how far it went (JSON-able)."""

    check: str
    first_step: Step
    last_step: Step
    repeats: int
    """Occurrences (steps it was seen at)."""
    reason: str
    """The first occurrence's reason."""
    nodes: list[NodeId]
    slots: list[SlotId]
    rids: list[Rid]
    """Every id the occurrences named, in order of first appearance."""


def cause_of(violation: Violation) -> Cause:
    """What makes two violations one finding: check, slots and nodes (requests come and go
    around the same broken slot), or the requests when a violation names nothing else."""
    if violation.slots or violation.nodes:
        return violation.check, violation.slots, violation.nodes, ()
    return violation.check, (), (), violation.rids


class ViolationGroups:
    """Groups built as violations arrive (the check table, the TUI list)."""

    def __init__(self) -> None:
        self.groups: list[ViolationGroup] = []
        self.occurrences = 0
        self._index: dict[Cause, int] = {}

    def add(self, violation: Violation) -> int:
        """File `violation` under its cause; returns the group's index."""
        self.occurrences += 1
        cause = cause_of(violation)
        index = self._index.get(cause)
        if index is None:
            index = self._index[cause] = len(self.groups)
            self.groups.append(
                ViolationGroup(
                    check=violation.check,
                    first_step=violation.step,
                    last_step=violation.step,
                    repeats=1,
                    reason=violation.reason,
                    nodes=list(violation.nodes),
                    slots=list(violation.slots),
                    rids=list(violation.rids),
                )  # fmt: skip
            )
            return index
        group = self.groups[index]
        group.repeats += 1
        group.first_step = min(group.first_step, violation.step)
        group.last_step = max(group.last_step, violation.step)
        for rid in violation.rids:  # the only ids a cause does not fix
            if rid not in group.rids:
                group.rids.append(rid)
        return index


def group_violations(violations: list[Violation]) -> list[ViolationGroup]:
    """`violations` grouped by cause, groups in order of first occurrence."""
    groups = ViolationGroups()
    for violation in violations:
        groups.add(violation)
    return groups.groups
