"""A virtual grid of coloured cells with a cursor: the base of the slot map and the page map.

Only the rows on screen are rendered, so 10k slots or a million pages cost the same per frame
as a hundred, and rendered rows are kept until their cells change: a restyle, a layout pass or
a cursor move elsewhere repaints from them, and a new frame that changes a few cells
(`cells_changed`) repaints only their rows. Subclasses say what one cell looks like and what
the row gutter says.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from itertools import groupby
from operator import itemgetter
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip

from .line_view import LineView
from .palette import CURSOR_STYLE

_LABEL_STYLE = Style(color="grey50")
_UNFOCUSED_CURSOR_STYLE = Style(underline=True)

RowKey = tuple[Hashable, int, int, int, bool, int, Style]
"""What a rendered row depends on: its cells' state (`row_state`; None past the last cell),
its first cell, the columns, where the cursor is in it (and the focus, if it is), the width
and the base style."""
MAX_CHANGED_CELLS = 4096
"""Cells `cells_changed` keeps track of; past that the next change redraws the whole grid."""


class CellGrid(LineView[RowKey], can_focus=True):
    """Cells laid out row by row; posts `CellHighlighted` as the cursor moves.

    | Key | Action |
    | :- | :- |
    | arrows | Move the cursor. |
    | pageup / pagedown | Move the cursor a screen. |
    | home / end | First / last cell. |
    | enter | Select the cell (the page map then lists the page's holders). |
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1, 0)", "Left", show=False),
        Binding("right", "move(1, 0)", "Right", show=False),
        Binding("up", "move(0, -1)", "Up", show=False),
        Binding("down", "move(0, 1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First", show=False),
        Binding("end", "cursor_to(-1)", "Last", show=False),
        Binding("enter", "select", "Select", show=False),
    ]

    DEFAULT_CSS = """
    CellGrid { background: $surface; overflow-x: hidden; }
    """

    CELL_WIDTH: ClassVar[int] = 1
    """Columns per cell, the coloured part plus any gap."""
    GAP: ClassVar[int] = 0
    """Trailing uncoloured columns of a cell (so neighbours stay apart)."""
    COLUMN_STEP: ClassVar[int] = 8
    """Cells per row are a multiple of this (when they fit), so ids line up down the rows."""

    class CellHighlighted(Message):
        """The cursor is on cell `index`."""

        def __init__(self, grid: CellGrid, index: int) -> None:
            super().__init__()
            self.grid = grid
            self.index = index

        @property
        def control(self) -> CellGrid:
            return self.grid

    class CellSelected(CellHighlighted):
        """Enter was pressed on cell `index`."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._count = 0
        self._version = 0
        """Bumped by `set_count`: rows rendered before show old data."""
        self._changes = 0
        """Counts `cells_changed` calls."""
        self._changed: dict[int, int] = {}
        """Cells `cells_changed` named since the last `set_count`, each with the number of the
        latest call that named it."""
        self._rows: LRUCache[RowKey, Strip] = LRUCache(256)

    # --- for subclasses ----------------------------------------------------------------

    def cell(self, index: int) -> tuple[str, Style]:
        """Glyph (CELL_WIDTH - GAP characters) and style of cell `index`."""
        raise NotImplementedError

    def row_cells(self, first: int, end: int) -> list[tuple[str, Style]]:
        """Cells [first, end); a subclass may build a row faster than cell by cell."""
        return [self.cell(index) for index in range(first, end)]

    def row_label(self, index: int) -> str:
        """Label of the row that starts with cell `index`."""
        return str(index)

    def row_state(self, first: int, end: int) -> Hashable:
        """What cells [first, end) look like, as far as the row cache is concerned: equal states,
        equal rows. By default the data version and the latest `cells_changed` among them; a
        subclass that holds its cells as bytes can give their slice instead."""
        changed = self._changed
        return self._version, max((changed.get(index, 0) for index in range(first, end)), default=0) if changed else 0

    def set_count(self, count: int) -> None:
        """Number of cells; call after the data changed (the screen is redrawn)."""
        self._count = count
        self._version += 1
        self._changed.clear()
        self._resize_virtual()
        if self.cursor >= count:
            self.cursor = max(0, count - 1)
        self.refresh()

    def cells_changed(self, cells: Collection[int]) -> None:
        """These cells look different now (the count is the same): the rows on screen that hold
        them are redrawn, the others stay as they are."""
        if len(self._changed) + len(cells) > MAX_CHANGED_CELLS:
            self.set_count(self._count)
            return
        self._changes += 1
        for cell in cells:
            self._changed[cell] = self._changes
        self.refresh_changed()

    # --- layout ------------------------------------------------------------------------

    @property
    def count(self) -> int:
        return self._count

    @property
    def label_width(self) -> int:
        return len(self.row_label(max(0, self._count - 1))) + 1

    @property
    def columns(self) -> int:
        return self._columns(self.size.width)

    def _columns(self, width: int) -> int:
        fits = max(1, (width - self.label_width) // self.CELL_WIDTH)
        return fits - fits % self.COLUMN_STEP if fits >= self.COLUMN_STEP else fits

    def _resize_virtual(self) -> None:
        # Not laid out yet (a tab never shown): it will be at most as wide as the screen, so it
        # has at least the rows that width gives (see LineView.set_virtual_size).
        width = self.size.width or self.app.size.width
        self.set_virtual_size(Size(self.size.width, -(-self._count // self._columns(width))))

    def on_resize(self, event: events.Resize) -> None:
        self._resize_virtual()

    # --- cursor --------------------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        columns, top = self.columns, self.scroll_offset.y
        self.scroll_to_region(Region(0, new // columns, 1, 1), animate=False, force=True, x_axis=False, immediate=True)
        if self.scroll_offset.y == top:  # a scroll repaints the grid; else two rows changed
            self.refresh_line(old // columns)
            self.refresh_line(new // columns)
        if self._count:
            self.post_message(self.CellHighlighted(self, new))

    def move_to(self, index: int) -> None:
        """Put the cursor on cell `index` (clamped)."""
        self.cursor = min(max(0, index), max(0, self._count - 1))

    def action_move(self, dx: int, dy: int) -> None:
        self.move_to(self.cursor + dx + dy * self.columns)

    def action_page(self, direction: int) -> None:
        self.move_to(self.cursor + direction * self.columns * max(1, self.size.height - 1))

    def action_cursor_to(self, index: int) -> None:
        self.move_to(index if index >= 0 else self._count - 1)

    def action_select(self) -> None:
        if self._count:
            self.post_message(self.CellSelected(self, self.cursor))

    def on_click(self, event: events.Click) -> None:
        row = int(self.scroll_offset.y) + event.y
        column = (event.x - self.label_width) // self.CELL_WIDTH
        if 0 <= column < self.columns:
            index = row * self.columns + column
            if index < self._count:
                self.move_to(index)

    def on_focus(self) -> None:
        self.refresh_line(self.cursor // self.columns)

    def on_blur(self) -> None:
        self.refresh_line(self.cursor // self.columns)

    # --- rendering -----------------------------------------------------------------------

    def line_key(self, y: int) -> RowKey:
        width, base = self.size.width, self.base_style
        columns = self.columns
        first = (int(self.scroll_offset.y) + y) * columns
        if first >= self._count:
            return (None, first, columns, -1, False, width, base)
        end = min(first + columns, self._count)
        cursor = self.cursor - first if first <= self.cursor < end else -1
        return (self.row_state(first, end), first, columns, cursor, cursor >= 0 and self.has_focus, width, base)

    def draw_line(self, y: int, key: RowKey) -> Strip:
        state, first, columns, cursor, focused, width, base = key
        if state is None:
            return Strip.blank(width, base)
        cached = self._rows.get(key)
        if cached is not None:
            return cached
        label_width = self.label_width
        segments = [Segment(self.row_label(first).rjust(label_width - 1) + " ", base + _LABEL_STYLE)]
        cells = self.row_cells(first, min(first + columns, self._count))
        if cursor >= 0:
            glyph, style = cells[cursor]
            cells[cursor] = glyph, style + (CURSOR_STYLE if focused else _UNFOCUSED_CURSOR_STYLE)
        if self.GAP:
            gap = Segment(" " * self.GAP, base)
            for glyph, style in cells:
                segments += (Segment(glyph, style), gap)
        else:  # neighbours of one style share a segment: a page map row is ~100 cells of a few styles
            for style, run in groupby(cells, key=itemgetter(1)):
                segments.append(Segment("".join(glyph for glyph, _ in run), style))
        strip = self._rows[key] = Strip(segments).crop_extend(0, width, base)
        return strip
