"""Graphviz views of a cache state, for bug reports: `render(state, "svg")`.

`render_dot` writes the DOT source (radix tree coloured by node state, mamba slots and requests
as linked records, violations highlighted, a legend; large trees folded with totals kept);
`render` runs a Graphviz binary on it (`find_dot`: the system's `dot`, else the
pip-installable `graphviz-pure`).
"""

from __future__ import annotations

from ._binary import DotBinary, find_dot, run_dot
from ._dot import DEFAULT_MAX_NODES, Highlight, Marked, Violations, focus_node, parse_focus, render_dot
from ._errors import DotFailed, DotNotFound, DotTimeout, RenderError, UnknownFocus
from ._fold import TOP, ChainBox, FoldBox, Totals, TreeView, node_box, select, tree_totals, view_totals
from ._render import OutputFormat, render

__all__ = [
    "DEFAULT_MAX_NODES",
    "TOP",
    "ChainBox",
    "DotBinary",
    "DotFailed",
    "DotNotFound",
    "DotTimeout",
    "FoldBox",
    "Highlight",
    "Marked",
    "OutputFormat",
    "RenderError",
    "Totals",
    "TreeView",
    "UnknownFocus",
    "Violations",
    "find_dot",
    "focus_node",
    "node_box",
    "parse_focus",
    "render",
    "render_dot",
    "run_dot",
    "select",
    "tree_totals",
    "view_totals",
]
