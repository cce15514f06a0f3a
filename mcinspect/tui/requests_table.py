"""The requests table: one row per request the scheduler holds at the selected step."""

from __future__ import annotations

from ..schema import RequestRecord, Rid
from .details import ping_pong_text
from .model import FrameView
from .row_table import Cells, RowTable


def request_cells(view: FrameView, req: RequestRecord) -> Cells:
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


class RequestsTable(RowTable):
    """Requests at the selected step, by rid; the row key is the rid."""

    COLUMNS = ("rid", "state", "row", "prefix", "committed", "working", "ping-pong (•last@seqlen)", "COW src")

    def show(self, view: FrameView) -> None:
        """Show the step's requests; the cursor stays on its rid."""
        requests = view.state.requests
        self.set_rows([(rid, request_cells(view, requests[rid])) for rid in sorted(requests)])

    @property
    def selected_rid(self) -> Rid | None:
        key = self.cursor_key
        return None if key is None else Rid(key)

    def select_rid(self, rid: Rid) -> bool:
        """Move the cursor to `rid`'s row; False if it is not in the table."""
        return self.move_to_key(rid)
