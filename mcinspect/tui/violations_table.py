"""The violations list: every violation found so far; enter jumps to it."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import DataTable

from .violations import ViolationRow

COLUMNS = ("step", "check", "node", "slot", "rid", "reason")


class ViolationsTable(DataTable[str]):
    """Violations oldest first; posts `Jump` on enter."""

    class Jump(Message):
        """Show the violation's step and select what it involves."""

        def __init__(self, violation: ViolationRow) -> None:
            super().__init__()
            self.violation = violation

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._rows: list[ViolationRow] = []

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def show(self, violations: list[ViolationRow], current_frame: int) -> None:
        """Refill when the list grew; rows at the shown frame are marked."""
        if violations == self._rows and self.row_count:
            return
        cursor = self.cursor_row
        self._rows = violations
        self.clear()
        for number, v in enumerate(violations):
            here = "▶" if v.frame == current_frame else " "
            self.add_row(
                f"{here}{v.step}",
                v.check,
                f"#{v.node}" if v.node >= 0 else "",
                str(v.slot) if v.slot >= 0 else "",
                v.rid,
                v.reason,
                key=str(number),
            )
        if self.row_count:
            self.move_cursor(row=min(cursor, self.row_count - 1))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Jump(self._rows[event.cursor_row]))
