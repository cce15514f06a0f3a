"""The violations list: every violation found so far; enter jumps to it."""

from __future__ import annotations

from textual.message import Message

from .row_table import RowTable
from .violations import ViolationRow


class ViolationsTable(RowTable):
    """Violations oldest first, those at the shown frame marked `>`; posts `Jump` on enter."""

    COLUMNS = ("step", "check", "node", "slot", "rid", "reason")

    class Jump(Message):
        """Show the violation's step and select what it involves."""

        def __init__(self, violation: ViolationRow) -> None:
            super().__init__()
            self.violation = violation

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._violations: list[ViolationRow] = []

    def show(self, violations: list[ViolationRow], current_frame: int) -> None:
        self._violations = violations
        self.set_rows(
            [
                (
                    str(number),
                    (
                        f"{'>' if v.frame == current_frame else ' '}{v.step}",  # ASCII: ▶ is wide in some fonts
                        v.check,
                        f"#{v.node}" if v.node >= 0 else "",
                        str(v.slot) if v.slot >= 0 else "",
                        v.rid,
                        v.reason,
                    ),
                )
                for number, v in enumerate(violations)
            ]
        )

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Jump(self._violations[event.index]))
