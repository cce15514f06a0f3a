"""`render`: a cache state to DOT source, SVG or PNG bytes."""

from __future__ import annotations

from typing import Literal

from ..schema import CacheState, NodeId, Rid
from ._binary import DEFAULT_TIMEOUT_S, DotBinary, run_dot
from ._dot import DEFAULT_MAX_NODES, Violations, render_dot

OutputFormat = Literal["dot", "svg", "png"]


def render(
    state: CacheState,
    fmt: OutputFormat = "svg",
    *,
    focus: NodeId | Rid | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    violations: Violations = (),
    focus_radius: int = 3,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    binary: DotBinary | None = None,
) -> bytes:
    """`render_dot`, then (for svg and png) the dot binary. Raises UnknownFocus, DotNotFound,
    DotFailed, DotTimeout; "dot" needs no binary."""
    source = render_dot(state, focus=focus, max_nodes=max_nodes, violations=violations, focus_radius=focus_radius)
    if fmt == "dot":
        return source.encode()
    return run_dot(source, fmt, timeout_s=timeout_s, binary=binary)
