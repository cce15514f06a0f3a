"""The radix tree panel: a virtual, lazily expanded view of the tree at the selected step.

Textual's Tree widget builds a widget-side node per line and walks them recursively; a radix
tree with 100k nodes or a deep chain needs neither. This view keeps only the set of expanded
node ids, derives the visible rows from the state (`tree_rows.build_rows`) and renders the rows
that are on screen. Rendered lines are cached by what they show: a node record is replaced
when it changes, so a cached line stays right across frames; a new frame repaints only the
lines on screen that look different, and a cursor move or a scroll renders only the lines that
are new on screen.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip

from ..schema import NodeId, NodeRecord
from .line_view import LineView
from .model import FrameView
from .palette import ROW_CURSOR_STYLE, UNFOCUSED_CURSOR_STYLE
from .tree_index import ROOT_PARENT
from .tree_rows import CHILD_PAGE, RowMarks, TreeRow, build_rows, limit_to_show, more_label, node_row_text

LineKey = tuple[TreeRow | None, NodeRecord | None, RowMarks | None, Style | None, int, Style]
"""What a line shows: the row (None past the last), the node record (None on a "more" row),
its marks, the cursor style (None off the cursor), the width and the base style."""


class RadixTreeView(LineView[LineKey], can_focus=True):
    """Lazy radix tree; posts `NodeHighlighted` as the cursor moves.

    | Key | Action |
    | :- | :- |
    | up / down | Move the cursor. |
    | pageup / pagedown | Move the cursor a screen. |
    | home / end | First / last row. |
    | right | Expand, or go to the first child. |
    | left | Collapse, or go to the parent. |
    | space | Expand or collapse. |
    | enter | Expand or collapse; on a "more" row, show more children. |
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First", show=False),
        Binding("end", "cursor_to(-1)", "Last", show=False),
        Binding("right", "expand", "Expand", show=False),
        Binding("left", "collapse", "Collapse", show=False),
        Binding("space", "toggle", "Toggle", show=False),
        Binding("enter", "toggle", "Toggle", show=False),
    ]

    DEFAULT_CSS = """
    RadixTreeView { background: $surface; overflow-x: hidden; }
    """

    class NodeHighlighted(Message):
        """The cursor of `tree` is on `node` (-1: on a placeholder or nothing)."""

        def __init__(self, tree: RadixTreeView, node: NodeId) -> None:
            super().__init__()
            self.tree = tree
            self.node = node

        @property
        def control(self) -> RadixTreeView:
            return self.tree

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: FrameView | None = None
        self.expanded: set[NodeId] = set()
        self._limits: dict[NodeId, int] = {}
        self._rows: list[TreeRow] = []
        self._on_path: set[NodeId] = set()
        self._matches: set[NodeId] = set()
        self._first_view = True
        self._lines: LRUCache[tuple[object, ...], tuple[NodeRecord | None, Strip]] = LRUCache(1024)

    # --- feeding ---------------------------------------------------------------------

    def show(self, view: FrameView) -> None:
        """Show another step; expansion and the cursor's node carry over."""
        keep = self.cursor_node
        self.view = view
        if self._first_view:
            # Open the top: a tree is read from its root, and sglang's root is one node with
            # the real first level below it.
            top = view.children.get(ROOT_PARENT, ())
            self.expanded.update(top)
            if len(top) == 1:
                self.expanded.update(view.children.get(top[0], ()))
            self._first_view = False
        self._rebuild(keep)

    def mark(self, *, on_path: set[NodeId] | None = None, matches: set[NodeId] | None = None) -> None:
        """Highlight a request's path and/or search matches."""
        if on_path is not None:
            self._on_path = on_path
        if matches is not None:
            self._matches = matches
        self.refresh_changed()

    def reveal(self, node: NodeId) -> bool:
        """Expand the path to `node` and put the cursor on it; False if it is not in the step."""
        if self.view is None or node not in self.view.state.nodes:
            return False
        path = self.view.path_to(node)
        self.expanded.update(path[:-1])
        for ancestor in path:
            limit_to_show(self.view, ancestor, self._limits)
        self._rebuild(node)
        return True

    @property
    def cursor_node(self) -> NodeId | None:
        if 0 <= self.cursor < len(self._rows) and not self._rows[self.cursor].more:
            return self._rows[self.cursor].node
        return None

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def _rebuild(self, keep: NodeId | None) -> None:
        assert self.view is not None
        self._rows = build_rows(self.view, self.expanded, self._limits)
        self.set_virtual_size(Size(self.size.width, len(self._rows)))
        line = self.cursor
        if keep is not None:
            line = next((i for i, row in enumerate(self._rows) if row.node == keep and not row.more), line)
        self.cursor = min(max(0, line), max(0, len(self._rows) - 1))
        self.refresh_changed()

    # --- cursor and actions ----------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        top = self.scroll_offset.y
        self.scroll_to_region(Region(0, new, 1, 1), animate=False, force=True, x_axis=False, immediate=True)
        if self.scroll_offset.y == top:  # a scroll repaints the view; else two lines changed
            self.refresh_line(old)
            self.refresh_line(new)
        node = self.cursor_node
        self.post_message(self.NodeHighlighted(self, node if node is not None else NodeId(-1)))

    def action_cursor(self, delta: int) -> None:
        self.cursor = min(max(0, self.cursor + delta), max(0, len(self._rows) - 1))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 1))

    def action_cursor_to(self, line: int) -> None:
        self.cursor = line if line >= 0 else max(0, len(self._rows) - 1)

    def action_expand(self) -> None:
        node = self.cursor_node
        if node is None or self.view is None or not self.view.children.get(node):
            return
        if node in self.expanded:
            self.action_cursor(1)
        else:
            self.expanded.add(node)
            self._rebuild(node)

    def action_collapse(self) -> None:
        if not self._rows or self.view is None:
            return
        row = self._rows[self.cursor]
        if not row.more and row.node in self.expanded:
            self.expanded.discard(row.node)
            self._rebuild(row.node)
            return
        parent = row.node if row.more else self.view.state.nodes[row.node].parent
        if parent in self.view.state.nodes:
            self._rebuild(parent)

    def action_toggle(self) -> None:
        if not self._rows or self.view is None:
            return
        row = self._rows[self.cursor]
        if row.more:
            self._limits[row.node] = self._limits.get(row.node, CHILD_PAGE) + CHILD_PAGE
            self._rebuild(None)
        elif row.node in self.expanded:
            self.expanded.discard(row.node)
            self._rebuild(row.node)
        elif self.view.children.get(row.node):
            self.expanded.add(row.node)
            self._rebuild(row.node)

    def on_click(self, event: events.Click) -> None:
        line = int(self.scroll_offset.y) + event.y
        if 0 <= line < len(self._rows):
            self.cursor = line
            if event.chain > 1:
                self.action_toggle()

    def on_resize(self, event: events.Resize) -> None:
        self.set_virtual_size(Size(event.size.width, len(self._rows)))

    # --- rendering -----------------------------------------------------------------------

    def line_key(self, y: int) -> LineKey:
        line = int(self.scroll_offset.y) + y
        width, base = self.size.width, self.base_style
        if self.view is None or line >= len(self._rows):
            return (None, None, None, None, width, base)
        row = self._rows[line]
        cursor = (ROW_CURSOR_STYLE if self.has_focus else UNFOCUSED_CURSOR_STYLE) if line == self.cursor else None
        node = None if row.more else self.view.state.nodes[row.node]
        marks = None if node is None else self._marks(row.node)
        return (row, node, marks, cursor, width, base)

    def draw_line(self, y: int, key: LineKey) -> Strip:
        row, node, marks, cursor, width, base = key
        if row is None:
            return Strip.blank(width, base)
        cache_key = (row, id(node), marks, cursor, width, base)  # a NodeRecord is not hashable
        cached = self._lines.get(cache_key)
        if cached is not None and cached[0] is node:
            return cached[1]
        text = more_label(row) if node is None or marks is None else node_row_text(node, row.level, marks)
        text.stylize_before(base)
        if cursor is not None:
            text.pad_right(width)  # the cursor bar spans the pane
            text.stylize(cursor)
        strip = Strip(list(text.render(self.app.console))).crop_extend(0, width, base)
        self._lines[cache_key] = (node, strip)
        return strip

    def _marks(self, node: NodeId) -> RowMarks:
        assert self.view is not None
        return RowMarks(
            expandable=bool(self.view.children.get(node)),
            expanded=node in self.expanded,
            on_path=node in self._on_path,
            match=node in self._matches,
            violation=node in self.view.violating_nodes,
        )

    def on_focus(self) -> None:
        self.refresh_line(self.cursor)

    def on_blur(self) -> None:
        self.refresh_line(self.cursor)
