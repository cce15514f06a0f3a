"""The slot map and the page map: CellGrids over the selected step."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable

from rich.style import Style

from ..schema import SlotId
from .cell_grid import CellGrid
from .model import FrameView, SlotOwner
from .palette import (
    GLYPH_LAST_TRACKED,
    GLYPH_MULTIPLE,
    GLYPH_PLAIN,
    GLYPH_VIOLATION,
    PAGE_HIGHLIGHT_STYLE,
    PAGE_STYLE_BY_FLAGS,
    SLOT_STYLES,
    VIOLATION_STYLE,
)


class SlotMap(CellGrid):
    """One cell per mamba slot, coloured by owner; the gutter gives the row's first slot id."""

    CELL_WIDTH = 3
    GAP = 1
    COLUMN_STEP = 10

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: FrameView | None = None

    def show(self, view: FrameView) -> None:
        """Show another step: only the slots that changed are drawn again."""
        shown, self.view = self.view, view
        if shown is None or shown.slot_ids != view.slot_ids:
            self.set_count(len(view.slot_ids))
        elif shown is not view:
            self.cells_changed([bisect_left(view.slot_ids, slot) for slot in view.slots_changed_since(shown)])

    def slot_at(self, index: int) -> SlotId | None:
        if self.view is None or not 0 <= index < len(self.view.slot_ids):
            return None
        return self.view.slot_ids[index]

    def select_slot(self, slot: SlotId) -> bool:
        """Move the cursor to `slot`; False if the step has no such slot."""
        if self.view is None or slot not in self.view.state.slots:
            return False
        self.move_to(self.view.slot_ids.index(slot))
        return True

    def cell(self, index: int) -> tuple[str, Style]:
        assert self.view is not None
        slot = self.view.slot_ids[index]
        owner = self.view.owner_of(slot)
        if slot in self.view.violating_slots:
            return GLYPH_VIOLATION + " ", VIOLATION_STYLE
        if owner is SlotOwner.MULTIPLE:
            marker = GLYPH_MULTIPLE
        elif self.view.is_last_tracked(slot):
            marker = GLYPH_LAST_TRACKED
        else:
            marker = GLYPH_PLAIN
        return marker + " ", SLOT_STYLES[owner]

    def row_label(self, index: int) -> str:
        slot = self.slot_at(index)
        return str(slot) if slot is not None else ""


class PageMap(CellGrid):
    """One cell per KV page, coloured by owner; the selection's pages are highlighted."""

    CELL_WIDTH = 1
    COLUMN_STEP = 16

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: FrameView | None = None
        self._owners = b""
        self._marked = b""

    def show(self, view: FrameView, marked: bytearray) -> None:
        """Show the step's pages; `marked` has 1 per page to highlight (see FrameView.pages_of).
        Only rows whose pages look different are drawn again."""
        self.view = view
        self._owners = view.page_owners
        self._marked = bytes(marked)
        if view.page_count == self.count:
            self.refresh_changed()
        else:
            self.set_count(view.page_count)

    def row_state(self, first: int, end: int) -> Hashable:
        return self._owners[first:end], self._marked[first:end]

    def cell(self, index: int) -> tuple[str, Style]:
        if index < len(self._marked) and self._marked[index]:
            return "▪", PAGE_HIGHLIGHT_STYLE
        return " ", PAGE_STYLE_BY_FLAGS[self._owners[index]]

    def row_cells(self, first: int, end: int) -> list[tuple[str, Style]]:
        owners, marked, styles = self._owners[first:end], self._marked[first:end], PAGE_STYLE_BY_FLAGS
        if not any(marked):  # most rows: no selected page in them
            return [(" ", styles[owner]) for owner in owners]
        return [self.cell(index) for index in range(first, end)]
