"""Widgets that take the size a layout pass measured without asking for one more pass.

Textual keeps the size the compositor measured in the reactive `virtual_size`, which asks for a
layout pass whenever it changes. A widget shown for the first time (a tab's pane, its legend, a
view's scrollbar) changes it from (0, 0): the first show of a tab took a second layout pass and
repaint of the pane (~5 ms at 160x48) for sizes the first pass had just set. Scrollbars still
appear and go as before: `_scroll_update` runs either way, and asks for a pass when one does.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scrollbar import ScrollBar
from textual.widget import Widget
from textual.widgets import TabPane


class SizedByLayout(Widget):
    """Mix in before a Widget class: the measured size is stored without a layout request."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # A container sized by its content (`height: auto`) arranges its children again at the
        # size it now has: that one still takes Textual's extra pass.
        layout = layout and self.is_container and self.styles.auto_dimensions
        return super()._size_updated(size, virtual_size, container_size, layout)


class Pane(SizedByLayout, TabPane):
    """A TabPane (CSS `TabPane` rules apply) whose first show is one layout pass, given a
    height that does not follow its content (TabPane's own is `auto`)."""


class ViewScrollBar(SizedByLayout, ScrollBar):
    """The scrollbar of a LineView."""
