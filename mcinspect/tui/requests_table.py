"""The requests table: one row per request the scheduler holds at the selected step."""

from __future__ import annotations

from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowDoesNotExist

from ..schema import RequestRecord, Rid
from .details import ping_pong_text
from .model import StepView

COLUMNS = ("rid", "state", "row", "prefix", "committed", "working", "ping-pong (•last@seqlen)", "COW src")

Cells = tuple[str, ...]


def request_cells(view: StepView, req: RequestRecord) -> Cells:
    return (
        req.rid,
        req.state,
        str(req.row),
        str(req.prefix_len),
        str(req.committed_len),
        str(req.working_slot) if req.working_slot >= 0 else "-",
        ping_pong_text(view, req.rid),
        str(req.cow_source) if req.cow_source >= 0 else "-",
    )


class RequestsTable(DataTable[str]):
    """Requests at the selected step, by rid; the row key is the rid."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._columns: list[ColumnKey] = []
        self._shown: dict[Rid, Cells] = {}

    def on_mount(self) -> None:
        self._columns = self.add_columns(*COLUMNS)

    def show(self, view: StepView) -> None:
        """Show the step's requests: changed cells in place when the same requests are there
        (a live frame), else a refill that keeps the cursor on its rid."""
        rows = {rid: request_cells(view, view.state.requests[rid]) for rid in sorted(view.state.requests)}
        if list(rows) == list(self._shown):
            for rid, cells in rows.items():
                old = self._shown[rid]
                for column, value, before in zip(self._columns, cells, old, strict=True):
                    if value != before:
                        self.update_cell(rid, column, value)
        else:
            keep = self.selected_rid
            self.clear()
            for rid, cells in rows.items():
                self.add_row(*cells, key=rid)
            if keep is not None:
                self.select_rid(keep)
        self._shown = rows

    @property
    def selected_rid(self) -> Rid | None:
        if not self.row_count:
            return None
        return Rid(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value or "")

    def select_rid(self, rid: Rid) -> bool:
        """Move the cursor to `rid`'s row; False if it is not in the table."""
        try:
            self.move_cursor(row=self.get_row_index(rid))
        except RowDoesNotExist:
            return False
        return True
