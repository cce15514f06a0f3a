"""DOT source of one cache state: the radix tree, its mamba slots, the requests and a legend.

A tree node is an HTML-like record: its label (id, depth, key length, KV pages, locks), and when
it holds a mamba slot a second cell for the slot (port `slot`), coloured by the slot's claims.
Slots held only by requests, or named by violations, are record boxes of their own. Requests are
record boxes with edges to their working, ping-pong (the last-tracked one bold, with its seqlen)
and copy-on-write slots, and a dotted edge to their last node.

SVG ids (the `id` attribute; Graphviz writes '-' as `&#45;`, which an XML parser reads back):

| box | id | class |
|---|---|---|
| tree node | `node-<id>` | `node` + its states (`violation tombstone locked evictable mamba plain`), `focus` |
| its slot cell | `a_slot-<slot>-node-<id>` (a `<g>` inside the node's) | |
| node missing from the tree | `node-<id>` | `node missing` (+ `violation`) |
| chain box | `chain-<first node id>` | `node chain` |
| fold box | `fold-<box above>` (`fold-top` for hidden roots) | `node fold` |
| slot box | `slot-<id>` | `node slot <kind>` (`tree working ping_pong0 ping_pong1 cow_source admission free unaccounted shared`) |
| request | `req-<rid>` | `node request <state>` |
| legend | `legend` | `node` |

Edges: `tree-<parent box>-<child box>`, `req-<rid>-working`, `req-<rid>-pp<i>`, `req-<rid>-cow`,
`req-<rid>-last`. Every box has a tooltip with the full record.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple, Protocol

from ..schema import CacheState, NodeId, RequestRecord, Rid, SlotId
from . import _labels as text
from ._errors import UnknownFocus
from ._fold import TOP, TreeView, node_box, select
from ._style import FOCUS_BORDER, FOLD_FILL, NODE_FILL, REQUEST_FILL, SLOT_FILL, VIOLATION_BORDER, legend_label, node_classes, slot_key

FONT = "DejaVu Sans"
"""The face a Linux desktop draws sans-serif text with, and one whose metrics Graphviz lays
out with: labels fit their boxes where the SVG is viewed. (Helvetica, Graphviz's usual, is laid
out with Helvetica's widths and drawn with DejaVu's, ~10% wider, on Linux.)"""
DEFAULT_MAX_NODES = 500
"""Boxes for tree nodes before a render folds (readable on a screen, laid out in about a second)."""
STRAIGHT_EDGES_ABOVE = 800
"""Tree boxes past which edges are straight lines (curves doubled the layout time of 2,000)."""


class Marked(Protocol):
    """What a render highlights: `mcinspect.checks.Violation` has these (and `check`)."""

    @property
    def nodes(self) -> Collection[NodeId]: ...
    @property
    def slots(self) -> Collection[SlotId]: ...
    @property
    def rids(self) -> Collection[Rid]: ...
    @property
    def reason(self) -> str: ...


class Highlight(NamedTuple):
    """A highlight without a checks Violation; a plain (nodes, slots, rids) tuple works too."""

    nodes: Collection[NodeId] = ()
    slots: Collection[SlotId] = ()
    rids: Collection[Rid] = ()
    reason: str = ""


Violations = Iterable[Marked | Sequence[Collection[object]]]


def parse_focus(state: CacheState, spec: str) -> NodeId | Rid:
    """A `--focus` argument: a request id of `state`, else a node id."""
    if spec in state.requests:
        return Rid(spec)
    if spec.lstrip("-").isdigit() and NodeId(int(spec)) in state.nodes:
        return NodeId(int(spec))
    raise UnknownFocus(f"--focus {spec}: no request or node with that id at step {state.step}; pick one from `mcinspect snapshot`")


def focus_node(state: CacheState, focus: NodeId | Rid | None) -> NodeId | None:
    """The node a focus centres on: the node itself, or the request's last node."""
    if focus is None:
        return None
    if isinstance(focus, str):
        request = state.requests.get(Rid(focus))
        if request is None:
            raise UnknownFocus(f"focus: no request {focus!r} at step {state.step}; pick one from `mcinspect snapshot`")
        if request.last_node not in state.nodes:
            raise UnknownFocus(f"focus: request {focus!r} has no last node in the tree (#{request.last_node}); focus on a node id")
        return request.last_node
    if focus not in state.nodes:
        raise UnknownFocus(f"focus: no node #{focus} at step {state.step}; pick one from `mcinspect snapshot`")
    return focus


class _Marks:
    """Violation reasons by node, slot and request."""

    def __init__(self, violations: Violations) -> None:
        self.nodes: dict[NodeId, list[str]] = {}
        self.slots: dict[SlotId, list[str]] = {}
        self.rids: dict[Rid, list[str]] = {}
        for item in violations:
            mark = item if hasattr(item, "nodes") else Highlight(*item)  # type: ignore[misc]
            check = getattr(mark, "check", "")
            reason = f"{check}: {mark.reason}" if check else mark.reason or "named by a violation"
            for node in mark.nodes:
                self.nodes.setdefault(node, []).append(reason)
            for slot in mark.slots:
                self.slots.setdefault(slot, []).append(reason)
            for rid in mark.rids:
                self.rids.setdefault(rid, []).append(reason)


def render_dot(
    state: CacheState,
    *,
    focus: NodeId | Rid | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    violations: Violations = (),
    focus_radius: int = 3,
) -> str:
    """DOT source of `state` (see the module docstring for ids and classes).

    Without a focus every request is drawn and its last node pinned; with one, only the path to
    the focus node (a node id, or a request's last node) and units within `focus_radius` steps
    of it are drawn, and requests whose last node is not drawn are left out (counted in the
    title). Past `max_nodes` tree boxes the rest folds (see `_fold`). Raises UnknownFocus.
    """
    marks = _Marks(violations)
    centre = focus_node(state, focus)
    last_nodes = [r.last_node for r in state.requests.values() if r.last_node in state.nodes]
    view = select(
        state,
        max_nodes=max_nodes,
        pinned=[] if centre is not None else [*last_nodes, *marks.nodes],
        unchained=[*last_nodes, *marks.nodes],
        flagged=marks.nodes.keys(),
        focus=centre,
        focus_radius=focus_radius,
    )
    return _Writer(state, view, marks, centre, focus if isinstance(focus, str) else None).source()


class _Writer:
    """One render's DOT lines. Tree-held slots are cells of their node's record (port `slot`);
    slots held only by requests, or named by violations, are boxes of their own."""

    def __init__(self, state: CacheState, view: TreeView, marks: _Marks, centre: NodeId | None, focus_rid: str | None) -> None:
        self.state, self.view, self.marks, self.centre = state, view, marks, centre
        self.drawn = set(view.nodes)
        self.requests = [
            r for r in state.requests.values() if centre is None or r.last_node in self.drawn or r.rid == focus_rid or r.rid in marks.rids
        ]
        named = set(marks.nodes) | {r.last_node for r in self.requests if r.last_node != -1}
        self.missing = sorted(named - state.nodes.keys())
        """Nodes that violations or requests name but the tree no longer has (ghosts)."""
        self.slot_home: dict[SlotId, str] = {}
        """Where an edge to a slot ends: the first drawn node's slot cell holding it."""
        for node in view.nodes:
            slot = state.nodes[node].mamba_slot
            if slot != -1:
                self.slot_home.setdefault(slot, f"{node_box(node)}:slot")
        self.slot_boxes: set[SlotId] = {s for s in marks.slots if s not in self.slot_home}
        self.lines: list[str] = []

    def source(self) -> str:
        state, view = self.state, self.view
        hidden = view.tree.nodes - len(view.nodes)
        title = (
            f"mcinspect: step {state.step}, {len(view.nodes):,} of {view.tree.nodes:,} nodes drawn"
            + (f" ({hidden:,} folded, totals kept)" if hidden else "")
            + f", {view.tree.slots:,} tree slots, {len(self.requests)} of {len(state.requests)} requests"
        )
        add = self.lines.append
        add("digraph mcinspect {")
        # nslimit bounds network-simplex passes: x-placement of a 2,000-node tree otherwise
        # dominates the layout time (measured 3x) for a barely tidier picture; past
        # STRAIGHT_EDGES_ABOVE boxes, spline routing would cost as much again.
        splines = "line" if view.boxes > STRAIGHT_EDGES_ABOVE else "true"
        add(f'  graph [rankdir=LR, labelloc=t, nslimit=1, splines={splines}, fontname="{FONT}", fontsize=12, label={text.quote(title)}];')
        add(f'  node [fontname="{FONT}", fontsize=10, shape=plain];')
        add(f'  edge [fontname="{FONT}", fontsize=9, arrowsize=0.6];')
        # The legend in a rank of its own past the deepest node: beside the tree, never over it.
        add(f'  {{ rank=sink; legend [id="legend", label={legend_label(bool(view.chains or view.folds))}]; }}')
        for node in view.nodes:
            self._node(node)
        for node in self.missing:
            self._missing(node)
        for chain in view.chains:
            self._fold_box(
                chain.name,
                f"chain-{chain.nodes[0]}",
                "chain",
                text.fold_label(chain.totals, True),
                text.fold_tooltip("chain", chain.nodes, chain.totals),
                chain.totals.flagged,
            )
        for fold in view.folds:
            above = "top" if fold.parent == TOP else fold.parent
            self._fold_box(
                fold.name,
                f"fold-{above}",
                "fold",
                text.fold_label(fold.totals, False),
                text.fold_tooltip(f"hidden subtrees below {above}", fold.roots, fold.totals),
                fold.totals.flagged,
            )
        for parent, child in view.edges:
            add(f'  {parent} -> {child} [id="tree-{parent}-{child}"];')
        for number, request in enumerate(self.requests):
            self._request(f"r{number}", request)
        for slot in sorted(self.slot_boxes):
            self._slot_box(slot)
        add("}")
        return "\n".join(self.lines) + "\n"

    def _node(self, node: NodeId) -> None:
        record = self.state.nodes[node]
        reasons = self.marks.nodes.get(node, [])
        classes = node_classes(record, bool(reasons)) + (["focus"] if node == self.centre else [])
        page_size = self.state.kv.page_size
        cells = [f'<TD ALIGN="LEFT">{text.html(text.node_box_label(record, page_size))}</TD>']
        if record.mamba_slot != -1:
            slot = record.mamba_slot
            claims = self.state.slots.get(slot, [])
            content = self.state.contents.get(slot)
            key = slot_key(claims)
            cells.append(
                f'<TD PORT="slot" ID="slot-{slot}-node-{node}" BGCOLOR="{SLOT_FILL[key][0]}" SIDES="L" BORDER="1" '
                f'TOOLTIP="{text.html_attr(text.slot_tooltip(slot, claims, content, self.marks.slots.get(slot, [])))}">'
                f"{text.html(chr(10).join(text.slot_label(slot, claims, content)))}</TD>"
            )
        border, width = self._border(bool(reasons) or bool(self.marks.slots.get(record.mamba_slot)), node == self.centre)
        style = "rounded,dashed" if record.tombstone else "rounded"
        label = (
            f'<<TABLE STYLE="{style}" BGCOLOR="{NODE_FILL[classes[0]][0]}" COLOR="{border}" BORDER="{width}" '
            f'CELLBORDER="0" CELLSPACING="0" CELLPADDING="4"><TR>{"".join(cells)}</TR></TABLE>>'
        )
        tooltip = text.node_tooltip(record, page_size, self.state.contents.get(record.mamba_slot), reasons)
        self.lines.append(
            f'  {node_box(node)} [id="node-{node}", class="{" ".join(classes)}", label={label}, tooltip={text.quote(tooltip)}];'
        )

    def _missing(self, node: NodeId) -> None:
        reasons = self.marks.nodes.get(node, [])
        border, width = self._border(bool(reasons), False)
        self.lines.append(
            f'  {node_box(node)} [id="node-{node}", class="missing{" violation" if reasons else ""}", shape=box, '
            f'style="dashed", color="{border}", penwidth={width}, label={text.quote(f"#{node} not in tree")}, '
            f"tooltip={text.quote(text.missing_node_tooltip(node, reasons))}];"
        )

    def _fold_box(self, name: str, svg_id: str, kind: str, label: str, tooltip: str, flagged: int) -> None:
        border, width = self._border(flagged > 0, False)
        style = "filled,dashed,rounded" if kind == "chain" else "filled,dashed"
        self.lines.append(
            f'  {name} [id="{svg_id}", class="{kind}", shape=box, style="{style}", fillcolor="{FOLD_FILL}", '
            f'color="{border}", penwidth={width}, label={text.quote(label)}, tooltip={text.quote(tooltip)}];'
        )

    def _request(self, name: str, request: RequestRecord) -> None:
        add = self.lines.append
        svg = f"req-{request.rid}"
        reasons = self.marks.rids.get(request.rid, [])
        border, width = self._border(bool(reasons), False)
        add(
            f'  {name} [id={text.quote(svg)}, class="request {request.state}", shape=record, style="filled", '
            f'fillcolor="{REQUEST_FILL}", color="{border}", penwidth={width}, '
            f"label={text.record_label(text.request_label(request))}, tooltip={text.quote(text.request_tooltip(request, reasons))}];"
        )
        links: list[tuple[SlotId, str, str, str]] = []
        if request.working_slot != -1:
            links.append((request.working_slot, "working", "working", ""))
        for index, slot in enumerate(request.ping_pong):
            if slot != -1:
                last = ', penwidth=2.2, fontcolor="#5b2a86"' if index == request.last_track_idx else ""
                links.append((slot, f"pp{index}", text.ping_pong_label(request, index), last))
        if request.cow_source != -1:
            links.append((request.cow_source, "cow", "cow src", ", style=dashed"))
        for slot, tag, label, extra in links:
            target = self.slot_home.get(slot)
            if target is None:
                self.slot_boxes.add(slot)
                target = f"s{slot}"
            add(f"  {name} -> {target} [id={text.quote(f'{svg}-{tag}')}, label={text.quote(label)}{extra}];")
        if request.last_node in self.drawn or request.last_node in self.missing:
            add(
                f'  {name} -> {node_box(request.last_node)} [id={text.quote(f"{svg}-last")}, label="last node", '
                'style=dotted, color="#777777", constraint=false];'
            )

    def _slot_box(self, slot: SlotId) -> None:
        claims = self.state.slots.get(slot, [])
        content = self.state.contents.get(slot)
        reasons = self.marks.slots.get(slot, [])
        key = slot_key(claims)
        border, width = self._border(bool(reasons) or key in ("shared", "unaccounted"), False)
        self.lines.append(
            f'  s{slot} [id="slot-{slot}", class="slot {key}{" violation" if reasons else ""}", shape=record, style="filled", '
            f'fillcolor="{SLOT_FILL[key][0]}", color="{border}", penwidth={width}, '
            f"label={text.record_label(text.slot_label(slot, claims, content))}, "
            f"tooltip={text.quote(text.slot_tooltip(slot, claims, content, reasons))}];"
        )

    @staticmethod
    def _border(violation: bool, focus: bool) -> tuple[str, int]:
        """Border colour and width: violations beat the focus."""
        if violation:
            return VIOLATION_BORDER, 3
        if focus:
            return FOCUS_BORDER, 3
        return "black", 1
