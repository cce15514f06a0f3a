"""`mcinspect snapshot --format tree`: the radix tree as a rich Tree in the terminal or a file.

The nodes shown are those a Graphviz render draws (`render.select`): past `max_nodes` lines,
runs of single-child nodes fold into one chain line and the hidden children of a line into
one fold line, each with the totals of what it holds, so every node has a line or is counted
in one. Two more rules keep the output readable at any depth:

- a line with a single child line continues it at the same indentation (`↳`), so a chain of
  any length costs no indentation;
- nesting stops at `max_levels` (rich indents 4 columns per level, and a label left with no
  width is dropped): what lies deeper becomes one fold line.

rich renders a Tree with an explicit stack, and this module builds it with one: a 100k-deep
tree overflows neither.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.style import Style
from rich.text import Text
from rich.tree import Tree

from .node_text import node_text
from .render import TOP, ChainBox, Totals, TreeView, node_box, select
from .schema import CacheState, NodeId, NodeRecord, Rid

DEFAULT_MAX_NODES = 200
"""Lines for tree nodes before the rest folds (a few screens)."""
MAX_LEVELS = 32
"""Deepest nesting in a file or a pipe (128 columns of guides)."""
LABEL_ROOM = 40
"""Columns a terminal keeps for the labels of the deepest level."""
FILE_WIDTH = 4 * MAX_LEVELS + 200
"""Width of plain output: the deepest guides plus any label, so nothing is cropped."""
RIDS_SHOWN = 3
"""Request ids listed on a node of their paths; more are counted."""
FOLD_IDS_SHOWN = 5
"""Top node ids listed on a fold line."""

_FOLD_STYLE = Style(italic=True, color="grey62")
_PATH_STYLE = Style(color="dodger_blue1")
_FLAG = Style(bold=True, color="bright_white", bgcolor="red")


@dataclass(frozen=True)
class TextTree:
    """A built tree and where its nodes went."""

    tree: Tree
    printed: int
    """Nodes with a line of their own."""
    folded: int
    """Nodes counted in chain and fold lines instead."""

    def footer(self) -> str | None:
        if not self.folded:
            return None
        return (
            f"+{_plural(self.folded, 'node')} not shown (counted in the … lines): raise --max-nodes to list more, "
            "or draw a subtree with `mcinspect render SOURCE --focus NODE`"
        )


def levels_for_width(width: int) -> int:
    """The deepest nesting that still leaves a terminal of `width` columns LABEL_ROOM for labels."""
    return max(2, min(MAX_LEVELS, (width - LABEL_ROOM) // 4))


def build_tree(
    state: CacheState,
    *,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_levels: int = MAX_LEVELS,
    flagged: Collection[NodeId] = (),
) -> TextTree:
    """The tree of `state`, no line nested deeper than `max_levels` (at least 2); `flagged`
    nodes (named by violations) are marked `!`, the first `max_nodes` of them never folded."""
    if max_levels < 2:
        raise ValueError(f"max_levels must be at least 2, got {max_levels}")
    last_nodes = [r.last_node for r in state.requests.values() if r.last_node in state.nodes]
    # Pinned nodes get a line whatever the budget: at most max_nodes of them (requests' nodes
    # first), the other flagged nodes are counted in the fold lines like any other.
    pinned = list(dict.fromkeys([*last_nodes, *sorted(n for n in flagged if n in state.nodes)]))[:max_nodes]
    view = select(state, max_nodes=max_nodes, pinned=pinned, unchained=pinned, flagged=flagged)
    boxes = _Boxes(state, view, set(flagged))
    title = Text(
        f"step {state.step}: {_plural(len(state.nodes), 'node')}, {view.tree.slots:,} holding a mamba slot, "
        f"{_plural(len(state.requests), 'request')}",
        style="bold",
    )
    if view.tree.flagged:
        title.append(f", {_plural(view.tree.flagged, 'node')} named by violations (!)", style="bold red")
    root = Tree(title)
    printed = boxes.attach(root, max_levels)
    return TextTree(root, printed, len(state.nodes) - printed)


def print_tree(tree: TextTree, console: Console) -> None:
    console.print(tree.tree, highlight=False)
    footer = tree.footer()
    if footer is not None:
        console.print(footer, style=_FOLD_STYLE, highlight=False)


def plain_text(tree: TextTree) -> str:
    """The tree without colour codes, wide enough that no label is cropped."""
    buffer = io.StringIO()
    print_tree(tree, Console(file=buffer, width=FILE_WIDTH, color_system=None, force_terminal=False, emoji=False))
    return buffer.getvalue()


class _Boxes:
    """The boxes of a `select` view as a tree of lines."""

    def __init__(self, state: CacheState, view: TreeView, flagged: set[NodeId]) -> None:
        self.state, self.flagged = state, flagged
        self.records: dict[str, NodeRecord] = {node_box(n): state.nodes[n] for n in view.nodes}
        self.chains = {c.name: c for c in view.chains}
        self.folds = {f.name: f for f in view.folds}
        self.children: dict[str, list[str]] = {}
        parent: dict[str, str] = {}
        for above, below in view.edges:
            self.children.setdefault(above, []).append(below)
            parent[below] = above
        # Top lines: drawn nodes without a parent (a chain always has one), then the fold of hidden tops.
        self.roots = [name for name in self.records if name not in parent] + [f.name for f in view.folds if f.parent == TOP]
        self.rids: dict[str, list[Rid]] = {}
        for request in state.requests.values():
            name: str | None = node_box(request.last_node) if request.last_node in state.nodes else None
            while name is not None:  # up the drawn boxes only: cheap however deep the tree
                self.rids.setdefault(name, []).append(request.rid)
                name = parent.get(name)

    def attach(self, root: Tree, max_levels: int) -> int:
        """Add every box under `root`; returns how many nodes got a line of their own."""
        printed = 0
        stack: list[tuple[str, Tree, int]] = [(name, root, 1) for name in reversed(self.roots)]
        while stack:
            name, parent, level = stack.pop()
            label = Text(no_wrap=True, overflow="crop")
            while True:  # the run of single-child lines starting at `name`
                if label:
                    label.append("\n↳ ", style="grey50")
                label.append_text(self._line(name))
                printed += name in self.records
                kids = self.children.get(name, [])
                if len(kids) != 1:
                    break
                name = kids[0]
            branch = parent.add(label)
            if kids and level + 1 >= max_levels:
                branch.add(self._deep_line(kids, max_levels))
            else:
                stack.extend((kid, branch, level + 1) for kid in reversed(kids))
        return printed

    def _line(self, name: str) -> Text:
        record = self.records.get(name)
        if record is None:
            chain = self.chains.get(name)
            if chain is not None:
                return self._chain_line(chain)
            fold = self.folds[name]
            return _fold_line(len(fold.roots), fold.roots, fold.totals, "")
        text = Text(no_wrap=True, overflow="crop")
        if record.id in self.flagged:
            text.append("!", style=_FLAG)
            text.append(" ")
        text.append_text(node_text(record))
        rids = self.rids.get(name)
        if rids:
            shown = ", ".join(r if len(r) <= 10 else r[:8] + ".." for r in rids[:RIDS_SHOWN])
            more = f" +{len(rids) - RIDS_SHOWN}" if len(rids) > RIDS_SHOWN else ""
            text.append(f"  ← {shown}{more}", style=_PATH_STYLE)
        return text

    def _chain_line(self, chain: ChainBox) -> Text:
        first, last = self.state.nodes[chain.nodes[0]], self.state.nodes[chain.nodes[-1]]
        text = Text(
            f"… {chain.totals.nodes:,} nodes in a chain #{first.id}..#{last.id} [{first.depth}..{last.depth + last.key_len})"
            + _extras(chain.totals, tokens=False),
            style=_FOLD_STYLE,
            no_wrap=True,
            overflow="crop",
        )
        rids = self.rids.get(chain.name)
        if rids:
            text.append(f"  ← {_plural(len(rids), 'request')}", style=_PATH_STYLE)
        return text

    def _deep_line(self, kids: list[str], max_levels: int) -> Text:
        """One line for every box below `kids` (nesting past `max_levels`)."""
        totals = Totals()
        stack = list(kids)
        while stack:
            name = stack.pop()
            record = self.records.get(name)
            if record is not None:
                totals = totals + Totals(
                    1, record.key_len, record.mamba_slot != -1, bool(record.full_lock or record.mamba_lock), record.id in self.flagged
                )
            else:
                box = self.chains.get(name) or self.folds[name]
                totals = totals + box.totals
            stack.extend(self.children.get(name, ()))
        tops = [self._top_node(kid) for kid in kids]
        return _fold_line(len(kids), tops, totals, f" deeper than {max_levels} levels")

    def _top_node(self, name: str) -> int:
        record = self.records.get(name)
        if record is not None:
            return record.id
        chain = self.chains.get(name)
        return chain.nodes[0] if chain is not None else self.folds[name].roots[0]


def _fold_line(subtrees: int, tops: Sequence[int], totals: Totals, where: str) -> Text:
    ids = " ".join(f"#{n}" for n in tops[:FOLD_IDS_SHOWN]) + (f" +{len(tops) - FOLD_IDS_SHOWN}" if len(tops) > FOLD_IDS_SHOWN else "")
    return Text(
        f"… {_plural(totals.nodes, 'more node')} in {_plural(subtrees, 'subtree')}{where} ({ids})" + _extras(totals),
        style=_FOLD_STYLE,
        no_wrap=True,
        overflow="crop",
    )


def _extras(totals: Totals, tokens: bool = True) -> str:
    parts = [_plural(totals.tokens, "token")] if tokens else []
    parts += [_plural(totals.slots, "mamba slot")] if totals.slots else []
    parts += [f"{totals.locked:,} locked"] if totals.locked else []
    parts += [f"{totals.flagged:,} named by violations"] if totals.flagged else []
    return (": " + ", ".join(parts)) if parts else ""


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
