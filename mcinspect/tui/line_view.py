"""The base of the tree, grid and table panels: a ScrollView that renders its own lines and,
when its data changes, repaints only the lines on screen that look different.

A whole-widget refresh costs Textual ~0.1 ms a line however cheap `render_line` is (styling,
filters, compositing), so a new frame that changes two rows of the slot map repaints those two.
Each line has a key, what it depends on; `refresh_changed` compares it with the key the line was
painted with. `Widget.rich_style` walks every ancestor's styles (a third of a tree repaint when
asked per line), so it is looked up once per repaint, in `render_lines`, as `base_style`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from rich.style import Style
from textual.geometry import Region, Size
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.strip import Strip

from .sized_by_layout import ViewScrollBar
from .textual_internals import MeasuredOnce, QuietFocus, fill_scrollbar_slot, scroll_update, scrollbar_slot, start_widget

KeyT = TypeVar("KeyT")
"""A subclass's line key (compared with `==`, so a key may hold unhashable records)."""


class LineView(QuietFocus, MeasuredOnce, ScrollView, Generic[KeyT]):
    """A ScrollView whose subclasses say what a line shows (`line_key`) and draw it (`draw_line`),
    and repaint the lines the cursor leaves and enters (`watch_cursor`). A focus change repaints
    only the cursor's lines (QuietFocus: the subclasses' on_focus / on_blur); scrollbars repaint
    only when what they show changed (MeasuredOnce)."""

    # `var`: a subclass's watch_cursor repaints the two lines that changed (or the view, when it
    # scrolls); a reactive would repaint every line on screen per key.
    cursor: var[int] = var(0, always_update=True)

    base_style: Style = Style()
    """The widget's rich style, as of the latest repaint."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._painted: dict[int, KeyT] = {}
        """Per screen line, the key it was last painted with."""

    def line_key(self, y: int) -> KeyT:
        """What screen line `y` shows: lines with equal keys look the same."""
        raise NotImplementedError

    def draw_line(self, y: int, key: KeyT) -> Strip:
        """Screen line `y`, whose key is `key`."""
        raise NotImplementedError

    def refresh_changed(self) -> None:
        """Repaint the lines on screen whose key changed since they were painted."""
        top = int(self.scroll_offset.y)
        painted = self._painted
        for y in range(self.size.height):
            if painted.get(y) != self.line_key(y):
                self.refresh_line(top + y)

    def set_virtual_size(self, size: Size) -> None:
        """Set the scrollable size: the scrollbars follow in place, without a layout pass
        (assigning `virtual_size` lays out the whole screen, ~3-10 ms) unless one appears or goes."""
        if size == self.virtual_size:
            return
        self.set_reactive(ScrollView.virtual_size, size)
        if self.styles.auto_dimensions:  # the view's own size follows its content
            self.refresh(layout=True)
        elif self.container_size:
            scroll_update(self, size)
        else:
            self._expect_scrollbars(size)

    def _expect_scrollbars(self, size: Size) -> None:
        # Never laid out (in a tab never shown): the pass that shows the view measures it, and a
        # scrollbar it then turned out to need cost two more passes, to place the bar and to
        # size it. Content larger than the screen overflows whatever the view's size: its bar is
        # made and shown now, so that the first pass places it.
        screen = self.app.size
        if self.styles.overflow_y in ("auto", "scroll") and size.height > screen.height:
            self.set_reactive(ScrollView.show_vertical_scrollbar, True)
            self.vertical_scrollbar.display = True
        if self.styles.overflow_x in ("auto", "scroll") and size.width > screen.width:
            self.set_reactive(ScrollView.show_horizontal_scrollbar, True)
            self.horizontal_scrollbar.display = True

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        return self._scrollbar(vertical=True)

    @property
    def horizontal_scrollbar(self) -> ScrollBar:
        return self._scrollbar(vertical=False)

    def _scrollbar(self, *, vertical: bool) -> ScrollBar:
        bar = scrollbar_slot(self, vertical=vertical)
        if bar is None:
            bar = self._start_scrollbar(vertical=vertical)
            fill_scrollbar_slot(self, bar, vertical=vertical)
        return bar

    def _start_scrollbar(self, *, vertical: bool) -> ScrollBar:
        # As Widget's own, but a bar sized in one pass (SizedByLayout) and styled now: Textual
        # styles a new bar at the next restyle (a focus change), a layout pass of its own.
        bar = ViewScrollBar(
            vertical=vertical,
            name="vertical" if vertical else "horizontal",
            thickness=self.scrollbar_size_vertical if vertical else self.scrollbar_size_horizontal,
        )
        start_widget(self.app, self, bar)
        self.app.stylesheet.apply(bar)
        return bar

    def render_lines(self, crop: Region) -> list[Strip]:
        self.base_style = self.rich_style
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        key = self._painted[y] = self.line_key(y)
        return self.draw_line(y, key)
