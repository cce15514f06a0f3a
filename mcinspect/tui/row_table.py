"""A virtual table: a fixed header over rows of text cells; only the rows on screen are rendered.

Textual's DataTable measures and styles every cell of every row it is given (a third of a
second for 1,000 requests, on each refill). Here a row is a tuple of strings, a column is as
wide as its longest cell (up to MAX_WIDTH, but for the last one), a table wider than the pane
scrolls sideways, and a repaint costs the rows on screen, whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip

from .line_view import LineView
from .palette import ROW_CURSOR_STYLE, UNFOCUSED_CURSOR_STYLE

Cells = tuple[str, ...]
Row = tuple[str, Cells]
"""(key, cells): the key names the row whatever its position."""
LineKey = tuple[Cells | None, tuple[int, ...], Style, int, int]
"""What a line shows: its cells (None past the last row), the column widths, the style, the
horizontal scroll and the width."""

_HEADER_STYLE = Style(bold=True, color="grey85", bgcolor="grey19")
_ZEBRA_STYLE = Style(bgcolor="grey11")


class RowTable(LineView[LineKey], can_focus=True):
    """Rows under a header line; posts `RowHighlighted` as the cursor moves, `RowSelected` on enter.

    | Key | Action |
    | :- | :- |
    | up / down | Move the cursor. |
    | left / right | Scroll a wide table sideways. |
    | pageup / pagedown | Move the cursor a screen. |
    | home / end | First / last row. |
    | enter | Select the row (a violation: jump to it). |
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move_to(0)", "First", show=False),
        Binding("end", "move_to(-1)", "Last", show=False),
        Binding("enter", "select", "Select", show=False),
    ]

    DEFAULT_CSS = """
    RowTable { background: $surface; }
    """

    COLUMNS: ClassVar[Cells] = ()
    """Header labels, one per cell of a row."""
    MAX_WIDTH: ClassVar[int] = 40
    """Widest a column other than the last gets; longer cells end in an ellipsis."""

    class RowHighlighted(Message):
        """The cursor is on row `index`, whose key is `key`."""

        def __init__(self, table: RowTable, index: int, key: str) -> None:
            super().__init__()
            self.table = table
            self.index = index
            self.key = key

        @property
        def control(self) -> RowTable:
            return self.table

    class RowSelected(RowHighlighted):
        """Enter was pressed on row `index`."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[Row] = []
        self._index: dict[str, int] = {}
        self._widths = tuple(len(label) for label in self.COLUMNS)

    # --- data -----------------------------------------------------------------------------

    def set_rows(self, rows: Sequence[Row]) -> None:
        """Show `rows` in this order; the cursor stays on its row's key if the key is still there."""
        rows = list(rows)
        if rows == self._rows:
            return
        keep = self.cursor_key
        self._rows = rows
        self._index = {key: index for index, (key, _) in enumerate(rows)}
        widths = [len(label) for label in self.COLUMNS]
        for column, cells in enumerate(zip(*(cells for _, cells in rows))):
            widths[column] = max(widths[column], max(map(len, cells)))
        self._widths = tuple(min(width, self.MAX_WIDTH) for width in widths[:-1]) + tuple(widths[-1:])
        self._resize_virtual()
        target = self._index.get(keep, self.cursor) if keep is not None else self.cursor
        target = min(target, max(0, len(rows) - 1))
        if target != self.cursor:
            self.cursor = target
        self.refresh_changed()

    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def cursor_key(self) -> str | None:
        """Key of the row under the cursor (None for an empty table)."""
        return self._rows[self.cursor][0] if 0 <= self.cursor < len(self._rows) else None

    def move_to_key(self, key: str) -> bool:
        """Put the cursor on the row with `key`; False if there is none."""
        index = self._index.get(key)
        if index is None:
            return False
        self.cursor = index
        return True

    # --- cursor ---------------------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        top, rows_shown = int(self.scroll_offset.y), max(1, self.size.height - 1)
        if new < top:
            self.scroll_to(y=new, animate=False, force=True, immediate=True)
        elif new >= top + rows_shown:
            self.scroll_to(y=new - rows_shown + 1, animate=False, force=True, immediate=True)
        else:  # no scroll: only the two rows whose look changed (a scroll repaints everything)
            self._refresh_row(old)
            self._refresh_row(new)
        if 0 <= new < len(self._rows):
            self.post_message(self.RowHighlighted(self, new, self._rows[new][0]))

    def _refresh_row(self, index: int) -> None:
        self.refresh_line(index + 1)  # line 0 of the virtual size is under the header

    def action_move(self, delta: int) -> None:
        self.action_move_to(min(max(0, self.cursor + delta), len(self._rows) - 1))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.size.height - 2))

    def action_move_to(self, index: int) -> None:
        if self._rows:
            self.cursor = index if index >= 0 else len(self._rows) - 1

    def action_select(self) -> None:
        if 0 <= self.cursor < len(self._rows):
            self.post_message(self.RowSelected(self, self.cursor, self._rows[self.cursor][0]))

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y - 1
        if event.y >= 1 and 0 <= index < len(self._rows):
            if index == self.cursor:
                self.action_select()  # as in DataTable: a click on the cursor's row selects it
            else:
                self.cursor = index

    def _resize_virtual(self) -> None:
        """One line per row and the header, as wide as the widest row (the last column's
        longest cell decides)."""
        self.set_virtual_size(Size(1 + sum(self._widths) + 2 * (len(self._widths) - 1), len(self._rows) + 1))

    def on_resize(self, event: events.Resize) -> None:
        self._resize_virtual()

    def on_focus(self) -> None:
        self._refresh_row(self.cursor)

    def on_blur(self) -> None:
        self._refresh_row(self.cursor)

    # --- rendering ------------------------------------------------------------------------

    def line_key(self, y: int) -> LineKey:
        width, base, left = self.size.width, self.base_style, int(self.scroll_offset.x)
        if y == 0:
            return (self.COLUMNS, self._widths, base + _HEADER_STYLE, left, width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self._rows):
            return (None, self._widths, base, left, width)
        style = base + _ZEBRA_STYLE if index % 2 else base
        if index == self.cursor:
            style += ROW_CURSOR_STYLE if self.has_focus else UNFOCUSED_CURSOR_STYLE
        return (self._rows[index][1], self._widths, style, left, width)

    def draw_line(self, y: int, key: LineKey) -> Strip:
        cells, widths, style, left, width = key
        if cells is None:
            return Strip.blank(width, style)
        last = len(widths) - 1
        parts = [_fit(cell, w) if column < last else cell for column, (cell, w) in enumerate(zip(cells, widths))]
        return Strip([Segment(" " + "  ".join(parts), style)]).crop_extend(left, left + width, style)


def _fit(cell: str, width: int) -> str:
    """`cell` padded or cut to `width` columns."""
    return cell.ljust(width) if len(cell) <= width else cell[: width - 1] + "…"
