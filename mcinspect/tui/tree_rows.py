"""The radix tree as visible rows: only expanded nodes' children, a page of them at a time.

Pure functions over a FrameView; the widget renders just the rows on screen. The walk is
iterative (as rich's tree is): a chain as deep as a long conversation cannot overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from ..node_text import node_text
from ..schema import NodeId, NodeRecord
from .model import FrameView
from .tree_index import ROOT_PARENT

CHILD_PAGE = 100
"""Children shown per expanded node before a "more" row; each "more" shows as many again."""
MAX_INDENT = 24
"""Levels indented; deeper rows print their level instead of ever more spaces."""


@dataclass(frozen=True, slots=True)
class TreeRow:
    """One visible line: a node, or a "more children of `node`" placeholder."""

    node: NodeId
    level: int
    more: int = 0
    """For a placeholder: how many children of `node` are still hidden."""


def build_rows(view: FrameView, expanded: set[NodeId], limits: dict[NodeId, int]) -> list[TreeRow]:
    """Rows for the expanded part of the tree, in display order."""
    children = view.children
    rows: list[TreeRow] = []
    stack: list[TreeRow] = []
    push = stack.append

    def push_children(parent: NodeId, level: int) -> None:
        kids = children.get(parent, ())
        limit = limits.get(parent, CHILD_PAGE)
        if len(kids) > limit:
            push(TreeRow(parent, level, more=len(kids) - limit))
        for kid in reversed(kids[:limit]):
            push(TreeRow(kid, level))

    push_children(ROOT_PARENT, 0)
    while stack:
        row = stack.pop()
        rows.append(row)
        if not row.more and row.node in expanded:
            push_children(row.node, row.level + 1)
    return rows


def limit_to_show(view: FrameView, node: NodeId, limits: dict[NodeId, int]) -> None:
    """Raise the child limit of `node`'s parent so that `node` gets a row."""
    record = view.state.nodes.get(node)
    if record is None:
        return
    parent = record.parent if record.parent in view.state.nodes else ROOT_PARENT
    siblings = view.children.get(parent, ())
    position = siblings.index(node) if node in siblings else 0
    limit = limits.get(parent, CHILD_PAGE)
    while limit <= position:
        limit += CHILD_PAGE
    limits[parent] = limit


@dataclass(frozen=True)
class RowMarks:
    """Why a row stands out, beyond the node's own state."""

    expandable: bool
    expanded: bool
    on_path: bool
    """On the selected request's path."""
    match: bool
    """A search match."""
    violation: bool


_DIM = Style(color="grey50")


def node_row_text(node: NodeRecord, level: int, marks: RowMarks) -> Text:
    """`▾ #12 [0..64) S5 L1/1 evictable  151644 872 …` with colours by state."""
    text = Text(no_wrap=True, overflow="crop")
    text.append(_indent(level))
    text.append("▾ " if marks.expanded else "▸ " if marks.expandable else "  ", style=_DIM)
    if marks.violation:
        text.append("!", style="bold bright_white on red")
        text.append(" ")
    id_style = Style()
    if marks.on_path:
        id_style += Style(bgcolor="navy_blue")
    if marks.match:
        id_style += Style(bgcolor="yellow4")
    text.append_text(node_text(node, id_style))
    return text


def more_label(row: TreeRow) -> Text:
    text = Text(no_wrap=True, overflow="crop")
    text.append(_indent(row.level))
    text.append(f"  … {row.more} more children (enter shows {min(row.more, CHILD_PAGE)})", style="italic grey62")
    return text


def _indent(level: int) -> str:
    if level <= MAX_INDENT:
        return "  " * level
    return "  " * (MAX_INDENT - 2) + f"⋯{level:<3}"
