"""Widgets that take the size a layout pass measured without asking for one more pass.

Textual keeps the size the compositor measured in the reactive `virtual_size`, which asks for a
layout pass whenever it changes. A widget shown for the first time (a tab's pane, its legend, a
view's scrollbar) changes it from (0, 0): the first show of a tab took a second layout pass and
repaint of the pane (~5 ms at 160x48) for sizes the first pass had just set. Scrollbars still
appear and go as before: `_scroll_update` runs either way, and asks for a pass when one does.
The override itself is `textual_internals.SizedByLayout`.
"""

from __future__ import annotations

from textual.scrollbar import ScrollBar
from textual.widgets import TabPane

from .textual_internals import SizedByLayout


class Pane(SizedByLayout, TabPane):
    """A TabPane (CSS `TabPane` rules apply) whose first show is one layout pass, given a
    height that does not follow its content (TabPane's own is `auto`)."""


class ViewScrollBar(SizedByLayout, ScrollBar):
    """The scrollbar of a LineView."""
