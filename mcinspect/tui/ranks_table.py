"""The ranks tab: one row per rank of the engine at the step on view (rank_summary.py)."""

from __future__ import annotations

from textual.message import Message

from .rank_summary import COLUMNS, RanksSummary, row_cells
from .row_table import RowTable


class RanksTable(RowTable):
    """Every rank side by side, with `tp-agree`'s verdict at the step on view; the row key is the
    rank; enter posts `SwitchRank`."""

    COLUMNS = COLUMNS

    class SwitchRank(Message):
        """Show this rank (at the same step)."""

        def __init__(self, rank: int) -> None:
            super().__init__()
            self.rank = rank

    def show(self, summary: RanksSummary) -> None:
        self.set_rows([(str(row.rank), row_cells(row)) for row in summary.rows])

    def on_row_table_row_selected(self, event: RowTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.SwitchRank(int(event.key)))
