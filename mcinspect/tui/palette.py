"""Colours and glyphs shared by the panels, so a slot is the same colour everywhere."""

from __future__ import annotations

from rich.style import Style

from .model import PageOwner, SlotOwner

SLOT_STYLES: dict[SlotOwner, Style] = {
    SlotOwner.FREE: Style(color="grey50", bgcolor="grey23"),
    SlotOwner.TREE: Style(color="white", bgcolor="dodger_blue3"),
    SlotOwner.WORKING: Style(color="black", bgcolor="green3"),
    SlotOwner.PING_PONG_0: Style(color="black", bgcolor="dark_orange"),
    SlotOwner.PING_PONG_1: Style(color="black", bgcolor="gold1"),
    SlotOwner.COW_SOURCE: Style(color="black", bgcolor="dark_turquoise"),
    SlotOwner.ADMISSION: Style(color="white", bgcolor="medium_purple3"),
    SlotOwner.UNACCOUNTED: Style(color="white", bgcolor="deep_pink4"),
    SlotOwner.MULTIPLE: Style(color="bright_white", bgcolor="red3", bold=True),
}

SLOT_LABELS: dict[SlotOwner, str] = {
    SlotOwner.FREE: "free",
    SlotOwner.TREE: "tree",
    SlotOwner.WORKING: "working",
    SlotOwner.PING_PONG_0: "ping-pong 0",
    SlotOwner.PING_PONG_1: "ping-pong 1",
    SlotOwner.COW_SOURCE: "COW source",
    SlotOwner.ADMISSION: "admission",
    SlotOwner.UNACCOUNTED: "unaccounted",
    SlotOwner.MULTIPLE: "claimed twice",
}

VIOLATION_STYLE = Style(color="bright_white", bgcolor="red", bold=True)
CURSOR_STYLE = Style(reverse=True, bold=True)
"""The cursor on a coloured cell."""
ROW_CURSOR_STYLE = Style(bgcolor="grey35", bold=True)
"""The cursor on a text row (reverse would turn a whole row white)."""
UNFOCUSED_CURSOR_STYLE = Style(bgcolor="grey23")
"""The cursor on a text row of a panel without the focus."""
HIGHLIGHT_STYLE = Style(underline=True, bold=True)

GLYPH_PLAIN = " "
GLYPH_LAST_TRACKED = "•"
"""Marks the ping-pong slot `mamba_last_track_idx` points at."""
GLYPH_MULTIPLE = "×"
GLYPH_VIOLATION = "!"

PAGE_STYLES: dict[int, Style] = {
    PageOwner.NONE: Style(color="grey35", bgcolor="grey15"),
    PageOwner.FREE: Style(color="grey50", bgcolor="grey23"),
    PageOwner.TREE: Style(color="white", bgcolor="dodger_blue3"),
    PageOwner.REQUEST: Style(color="black", bgcolor="green3"),
    PageOwner.TREE | PageOwner.REQUEST: Style(color="white", bgcolor="medium_purple3"),
}
PAGE_CONFLICT_STYLE = Style(color="bright_white", bgcolor="red3", bold=True)
"""A page that is free and owned at once."""
PAGE_HIGHLIGHT_STYLE = Style(color="black", bgcolor="bright_white", bold=True)

PAGE_LABELS: dict[int, str] = {
    PageOwner.NONE: "unaccounted",
    PageOwner.FREE: "free",
    PageOwner.TREE: "tree node",
    PageOwner.REQUEST: "request",
    PageOwner.TREE | PageOwner.REQUEST: "tree + request",
}


def _page_style(flags: int) -> Style:
    if flags & PageOwner.FREE and flags != PageOwner.FREE:
        return PAGE_CONFLICT_STYLE
    return PAGE_STYLES[flags]


PAGE_STYLE_BY_FLAGS: tuple[Style, ...] = tuple(_page_style(flags) for flags in range(1 << len(PageOwner)))
"""Style of a page cell, indexed by its PageOwner flags (a tuple index: the page map looks up
thousands of cells per repaint, and IntFlag arithmetic is slow)."""


LegendEntries = list[tuple[str, str, Style]]
"""(swatch text, label, swatch style) per legend entry."""


def slot_legend() -> LegendEntries:
    entries = [("  ", SLOT_LABELS[owner], SLOT_STYLES[owner]) for owner in SlotOwner]
    entries.append((GLYPH_LAST_TRACKED + " ", "last tracked", SLOT_STYLES[SlotOwner.PING_PONG_0]))
    entries.append((GLYPH_VIOLATION + " ", "violation", VIOLATION_STYLE))
    return entries


def page_legend() -> LegendEntries:
    entries = [(" ", PAGE_LABELS[flags], PAGE_STYLES[flags]) for flags in PAGE_STYLES]
    entries += [(" ", "free and held", PAGE_CONFLICT_STYLE), ("▪", "selected", PAGE_HIGHLIGHT_STYLE)]
    return entries
