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
from textual.scroll_view import ScrollView
from textual.strip import Strip

KeyT = TypeVar("KeyT")
"""A subclass's line key (compared with `==`, so a key may hold unhashable records)."""


class LineView(ScrollView, Generic[KeyT]):
    """A ScrollView whose subclasses say what a line shows (`line_key`) and draw it (`draw_line`)."""

    base_style: Style = Style()
    """The widget's rich style, as of the latest repaint."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._painted: dict[int, KeyT] = {}
        """Per screen line, the key it was last painted with."""
        self._measured: tuple[Size, Size, Size] | None = None
        """(size, virtual size, container size) at the latest layout pass that changed one."""

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

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # ScrollView compares `virtual_size` (here the viewport the compositor measured) with its
        # own (the content), which differ whenever the view scrolls: every layout pass anywhere
        # on screen repainted this view's scrollbars (~1 ms each). Update them when what they
        # show changed.
        measured = (size, self.virtual_size, container_size)
        if measured == self._measured:
            return False
        self._measured = measured
        return super()._size_updated(size, virtual_size, container_size, layout)

    def render_lines(self, crop: Region) -> list[Strip]:
        self.base_style = self.rich_style
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        key = self._painted[y] = self.line_key(y)
        return self.draw_line(y, key)
