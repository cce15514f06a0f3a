"""Which tree nodes a render draws, and what the folded rest adds up to.

A large tree is unreadable and slow to lay out, so past `max_nodes` boxes (or with a focus) the
view folds: maximal chains of single-child nodes become one chain box, and the hidden children of
a drawn box become one fold box ("+312 nodes / 41k tok"). Nodes that matter for debugging (the
focus, violating nodes, requests' last nodes) are pinned with their ancestors; the remaining
budget goes first to subtrees holding locks or violations, then mamba state, then the rest
(unlocked subtrees without mamba state fold first), shallow before deep; with a focus, by
distance from it. Every node is drawn, in a chain, or below a fold root, so the totals of the
boxes equal the totals of the tree (`view_totals(view) == tree_totals(...)`).

Everything is iterative: a radix tree can be 100k nodes deep.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection
from dataclasses import dataclass, field

from ..schema import CacheState, NodeId
from ._index import Totals, TreeIndex

CHAIN_MIN = 2
"""Shortest run of single-child nodes worth a chain box (a box per node below that)."""
TOP = "top"
"""Box name of the virtual parent of the tree's roots (never drawn)."""


@dataclass(frozen=True)
class ChainBox:
    """A run of single-child nodes drawn as one box."""

    name: str
    nodes: list[NodeId]
    """Top to bottom."""
    totals: Totals


@dataclass(frozen=True)
class FoldBox:
    """The hidden subtrees below one drawn box, drawn as one box."""

    name: str
    parent: str
    """Box name of the drawn box above (TOP for hidden roots)."""
    roots: list[NodeId]
    """Top nodes of the hidden subtrees; everything below them is hidden too."""
    totals: Totals


@dataclass
class TreeView:
    """The boxes of one render: nodes drawn as themselves, chain boxes, fold boxes, and the
    tree edges between them as (parent box name, child box name)."""

    nodes: list[NodeId] = field(default_factory=list)
    chains: list[ChainBox] = field(default_factory=list)
    folds: list[FoldBox] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)
    drawn_totals: Totals = Totals()
    """Totals of `nodes` alone."""
    tree: Totals = Totals()
    """Totals of the whole tree."""

    @property
    def boxes(self) -> int:
        return len(self.nodes) + len(self.chains) + len(self.folds)


def node_box(node: NodeId) -> str:
    """DOT name of a node drawn as itself (a plain DOT ID even for a negative id)."""
    return f"n{node}" if node >= 0 else f"nm{-node}"


def tree_totals(state: CacheState, flagged: Collection[NodeId] = ()) -> Totals:
    """Totals of every node of `state` (what a folded view must still add up to)."""
    nodes = state.nodes.values()
    return Totals(
        nodes=len(state.nodes),
        tokens=sum(n.key_len for n in nodes),
        slots=sum(1 for n in nodes if n.mamba_slot != -1),
        locked=sum(1 for n in nodes if n.full_lock or n.mamba_lock),
        flagged=sum(1 for f in set(flagged) if f in state.nodes),
    )


def view_totals(view: TreeView) -> Totals:
    """Totals of the boxes of `view`: drawn nodes + chains + folds."""
    total = view.drawn_totals
    for box in [*view.chains, *view.folds]:
        total = total + box.totals
    return total


@dataclass
class _Units:
    """The tree with chains contracted: a unit is one node, or a run of chain-eligible nodes."""

    first: list[int]
    length: list[int]
    parent: list[int]
    """Parent unit, -1 for roots."""
    children: list[list[int]]
    of: list[int]
    """Unit of each node position."""


def _units(index: TreeIndex, eligible: list[bool]) -> _Units:
    count = len(index.ids)
    run_of = [-1] * count
    run_len: list[int] = []
    for here in range(count):  # parent-first: a run's top is met before the rest of it
        if not eligible[here]:
            continue
        up = index.parent[here]
        if up >= 0 and eligible[up]:
            run_of[here] = run_of[up]
            run_len[run_of[here]] += 1
        else:
            run_of[here] = len(run_len)
            run_len.append(1)
    units = _Units(first=[], length=[], parent=[], children=[], of=[-1] * count)
    for here in range(count):
        run = run_of[here]
        up = index.parent[here]
        if run >= 0 and run_len[run] >= CHAIN_MIN and up >= 0 and run_of[up] == run:
            unit = units.of[up]
            units.of[here] = unit
            units.length[unit] += 1
            continue
        unit = len(units.first)
        units.of[here] = unit
        units.first.append(here)
        units.length.append(1)
        units.parent.append(units.of[up] if up >= 0 else -1)
        units.children.append([])
        if up >= 0:
            units.children[units.of[up]].append(unit)
    return units


def select(
    state: CacheState,
    *,
    max_nodes: int,
    pinned: Collection[NodeId] = (),
    unchained: Collection[NodeId] = (),
    flagged: Collection[NodeId] = (),
    focus: NodeId | None = None,
    focus_radius: int = 3,
) -> TreeView:
    """Choose the boxes of a render (see the module docstring).

    `pinned` nodes (and the `focus`) are drawn with their ancestors whatever the budget, so the
    view may exceed `max_nodes` when they alone do; `unchained` and `flagged` nodes never
    disappear into a chain box; with a `focus`, the budget goes only to units within
    `focus_radius` steps of it, and the tree folds even when it would fit.
    """
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    flagged_set = set(flagged)
    index = TreeIndex(state, flagged_set)
    count = len(index.ids)
    folding = focus is not None or count > max_nodes
    centre = [focus] if focus is not None else []
    must_show = {index.pos[n] for n in [*pinned, *centre] if n in index.pos}
    keep = must_show | {index.pos[n] for n in unchained if n in index.pos}
    if folding:
        eligible = [index.parent[h] >= 0 and len(index.children[h]) == 1 and h not in keep and not index.flagged[h] for h in range(count)]
    else:
        eligible = [False] * count
    units = _units(index, eligible)
    shown = _choose(index, units, max_nodes if folding else count + 1, must_show, focus, focus_radius)
    return _view(index, units, shown)


def _tier(index: TreeIndex, here: int) -> int:
    """Budget order: locks or violations below first, then mamba state, then the rest."""
    below = index.subtree(here)
    if below.locked or below.flagged:
        return 0
    return 1 if below.slots else 2


def _choose(index: TreeIndex, units: _Units, budget: int, must_show: set[int], focus: NodeId | None, radius: int) -> list[bool]:
    """Greedy: pin, then add the best frontier unit while the box count stays within budget.

    Boxes = shown units + one fold box per box (or the virtual top) with hidden children.
    """
    n_units = len(units.first)
    shown = [False] * n_units
    hidden_children = [len(c) for c in units.children]
    top_hidden = sum(1 for u in range(n_units) if units.parent[u] < 0)
    distance: dict[int, int] = {}

    def show(unit: int) -> int:
        """Mark `unit` shown; return the change in box count."""
        shown[unit] = True
        parent = units.parent[unit]
        delta = 1 + (1 if units.children[unit] else 0)
        nonlocal top_hidden
        if parent < 0:
            top_hidden -= 1
            delta -= 1 if top_hidden == 0 else 0
        else:
            hidden_children[parent] -= 1
            delta -= 1 if hidden_children[parent] == 0 else 0
        return delta

    pinned_units = sorted({units.of[h] for h in must_show})
    path: list[int] = []
    for unit in pinned_units:
        path.clear()
        while unit >= 0 and not shown[unit]:
            path.append(unit)
            unit = units.parent[unit]
        for step in reversed(path):  # root side first, so each parent is shown before its child
            shown[step] = True
    if focus is not None and focus in index.pos:
        unit, steps = units.of[index.pos[focus]], 0
        while unit >= 0:
            distance[unit] = steps
            unit, steps = units.parent[unit], steps + 1
    # Recount from scratch after pinning: simpler than tracking deltas of partial paths.
    boxes = sum(shown)
    for unit in range(n_units):
        parent = units.parent[unit]
        if shown[unit]:
            hidden_children[parent] -= 1 if parent >= 0 else 0
            top_hidden -= 1 if parent < 0 else 0
    boxes += sum(1 for u in range(n_units) if shown[u] and hidden_children[u]) + (1 if top_hidden else 0)

    depth = [0] * n_units
    for unit in range(n_units):  # units are numbered parent-first
        parent = units.parent[unit]
        depth[unit] = depth[parent] + 1 if parent >= 0 else 0

    def priority(unit: int) -> tuple[int, int, int, int]:
        here = units.first[unit]
        if focus is not None:
            return (distance.get(unit, 0), _tier(index, here), depth[unit], unit)
        return (0, _tier(index, here), depth[unit], unit)

    frontier: list[tuple[tuple[int, int, int, int], int]] = []

    def offer(unit: int) -> None:
        if focus is not None:
            parent = units.parent[unit]
            if parent < 0 or parent not in distance:
                return  # other roots and their subtrees stay folded around a focus
            distance[unit] = distance[parent] + 1
            if distance[unit] > radius:
                return
        heapq.heappush(frontier, (priority(unit), unit))

    for unit in range(n_units):
        parent = units.parent[unit]
        if not shown[unit] and (parent < 0 or shown[parent]):
            offer(unit)
    while frontier and boxes < budget:
        _, unit = heapq.heappop(frontier)
        parent = units.parent[unit]
        cost = 1 + (1 if units.children[unit] else 0)
        last_hidden = (top_hidden if parent < 0 else hidden_children[parent]) == 1
        if boxes + cost - (1 if last_hidden else 0) > budget:
            continue
        boxes += show(unit)
        for child in units.children[unit]:
            offer(child)
    return shown


def _view(index: TreeIndex, units: _Units, shown: list[bool]) -> TreeView:
    view = TreeView(tree=index.total())
    box_of_unit: dict[int, str] = {}
    hidden_under: dict[str, list[int]] = {}
    drawn = Totals()
    for unit in range(len(units.first)):  # parent-first, so a parent's box is named first
        parent = units.parent[unit]
        if parent >= 0 and not shown[parent]:
            continue  # inside a hidden subtree, counted by its fold
        above = box_of_unit[parent] if parent >= 0 else TOP
        if not shown[unit]:
            hidden_under.setdefault(above, []).append(unit)
            continue
        here = units.first[unit]
        if units.length[unit] == 1:
            name = node_box(index.ids[here])
            view.nodes.append(index.ids[here])
            drawn = drawn + index.own(here)
        else:
            members, totals, step = [], Totals(), here
            for _ in range(units.length[unit]):
                members.append(index.ids[step])
                totals = totals + index.own(step)
                step = index.children[step][0] if index.children[step] else step
            name = f"c{members[0]}"
            view.chains.append(ChainBox(name, members, totals))
        box_of_unit[unit] = name
        if above != TOP:
            view.edges.append((above, name))
    for above, hidden in hidden_under.items():
        totals = Totals()
        for unit in hidden:
            totals = totals + index.subtree(units.first[unit])
        name = f"f_{above}"
        view.folds.append(FoldBox(name, above, [index.ids[units.first[u]] for u in hidden], totals))
        if above != TOP:
            view.edges.append((above, name))
    view.drawn_totals = drawn
    return view
