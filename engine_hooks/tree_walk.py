"""Walks of a tree whose nodes are reached only from its root (no arena): MambaRadixCache
(0.5.10-0.5.15) and 0.5.16's UnifiedRadixCache keep their nodes this way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .event_sink import EventSink


def arena_of(root: Any, sink: EventSink | None) -> dict[int, Any]:
    """NodeId -> node, ids ascending: the node map the dirty-mark hooks keep in `sink` (the same
    dict; walked into it when they keep none yet: first, and after a `reset()`), or with no
    sink walked afresh, a new dict."""
    if sink is None:
        return walked_arena(root)
    if sink.node_map is None:
        sink.node_map = walked_arena(root)
    return sink.node_map


def walked_arena(root: Any) -> dict[int, Any]:
    """NodeId -> node for every node under `root` (itself included), ids ascending (the newest
    last: ids come from a class counter); a new dict each call."""
    nodes: list[Any] = []
    stack = [root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    return {node.id: node for node in sorted(nodes, key=lambda n: n.id)}


def walked_depths(root: Any) -> list[tuple[Any, int]]:
    """(node, depth in tokens) for every node under `root`, depth-first from it."""
    items: list[tuple[Any, int]] = []
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        items.append((node, depth))
        stack.extend((child, depth + len(node.key)) for child in node.children.values())
    return items
