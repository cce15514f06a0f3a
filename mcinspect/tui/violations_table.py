"""The violations list: one row per cause (checks.grouping), expandable to its occurrences.

| key | what it does |
|---|---|
| enter | jump to the violation (on a group: its first occurrence) |
| space | expand a group to its occurrences, or fold it again |
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message

from ..checks import ViolationGroups, cause_of
from ..checks.grouping import Cause
from .row_table import Cells, RowTable
from .violations import ViolationRow


class ViolationsTable(RowTable):
    """Groups in order of first occurrence, those seen at the shown frame marked `>`; posts
    `Jump` on enter."""

    COLUMNS = ("step", "seen", "check", "node", "slot", "rid", "reason")
    BINDINGS: ClassVar[list[BindingType]] = [Binding("space", "toggle_group", "Expand / fold", show=False)]

    class Jump(Message):
        """Show the violation's step and select what it involves."""

        def __init__(self, violation: ViolationRow) -> None:
            super().__init__()
            self.violation = violation

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._violations: list[ViolationRow] = []
        self._current_frame = -1
        self._expanded: set[Cause] = set()
        self._entries: list[tuple[Cause, ViolationRow]] = []
        """Per row: its group's cause and the violation it jumps to."""

    def show(self, violations: list[ViolationRow], current_frame: int) -> None:
        self._violations, self._current_frame = violations, current_frame
        groups = ViolationGroups()
        members: list[list[int]] = []
        for number, row in enumerate(violations):
            index = groups.add(row.violation)
            if index == len(members):
                members.append([])
            members[index].append(number)
        rows: list[tuple[str, Cells]] = []
        self._entries = []
        for index, (group, numbers) in enumerate(zip(groups.groups, members)):
            first = violations[numbers[0]]
            cause = cause_of(first.violation)
            here = any(violations[n].frame == current_frame for n in numbers)
            steps = str(group.first_step) if group.first_step == group.last_step else f"{group.first_step}..{group.last_step}"
            fold = "" if group.repeats == 1 else ("-" if cause in self._expanded else "+")
            rows.append((f"g{index}", (f"{'>' if here else ' '}{steps}", f"{fold}{group.repeats}x", *_ids(first), group.reason)))
            self._entries.append((cause, first))
            if group.repeats > 1 and cause in self._expanded:
                for n in numbers:
                    v = violations[n]
                    rows.append((f"v{n}", (f"{'>' if v.frame == current_frame else ' '}  {v.step}", "", *_ids(v), v.reason)))
                    self._entries.append((cause, v))
        self.set_rows(rows)

    def action_toggle_group(self) -> None:
        if not 0 <= self.cursor < len(self._entries):
            return
        cause = self._entries[self.cursor][0]
        self._expanded.symmetric_difference_update({cause})
        self.show(self._violations, self._current_frame)

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Jump(self._entries[event.index][1]))


def _ids(v: ViolationRow) -> tuple[str, str, str, str]:
    """check, node, slot, rid cells (ASCII only: ▶ and friends are wide in some fonts)."""
    return v.check, f"#{v.node}" if v.node >= 0 else "", str(v.slot) if v.slot >= 0 else "", v.rid
