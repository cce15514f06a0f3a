"""Node-level dirty marks for sglang's MambaRadixCache (0.5.10-0.5.15), which keeps no node
arena: these hook bodies mark the nodes whose records may have changed and keep the cache's
nodes by id (`EventSink.node_map`), so that a capture reads the marked nodes, not the tree.

Every change to a node's recorded fields goes through one of the methods hooked here (the same
in each of those releases; hooks_mrc's "marks.*" rows):
- `LRUList._remove_node` / `_add_node_after`, the two primitives of both LRU lists: a node
  created (every new node enters the full LRU list at once: an insert's new leaf and a split's
  new parent), moved to the most recent end (a match or insert touches it: last access, key and
  value of a split child), a state stored, tombstoned or evicted (mamba list membership), and
  the neighbour whose older link (`mamba_lru_older`) now points elsewhere;
- `_delete_leaf` / `_delete_tombstone_leaf`: a node leaves the tree, its parent may become a leaf;
- `inc_lock_ref` / `dec_lock_ref`: lock refs along the path to the root;
- `reset`: a new root; the nodes are walked afresh at the next capture.
The root's last access moves with every match and insert: the view marks it at each capture.
"""

from __future__ import annotations

from typing import Any

from .event_sink import EventSink
from .events_mrc import _arg


class MrcMarks:
    """Bodies of the "marks.*" rows: run at every step (a mark missed is a stale record)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def linked(self, lru: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `LRUList._add_node_after(old, new)`: a node not kept yet is new to the tree,
        kept at the map's end (ids only grow: Capture reads the tail it has not seen). Nothing
        else to mark: a node linked again was unlinked first; `old`, whose older link becomes
        `new`, is the list's head or a node the same `reset_node_and_parents_mru` just moved;
        a new node's parent, which gained a child, was moved by the insert's walk (or is the root)."""
        new = _arg(args, kwargs, 1, "new_node")
        nodes = self.sink.node_map
        if nodes is not None and new.id not in nodes and new.parent is not None:
            nodes[new.id] = new

    def unlinking(self, lru: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `LRUList._remove_node(node)`: on the mamba list, its newer neighbour's older
        link (`mamba_lru_older`) moves past it; the full list's links are not recorded."""
        node = _arg(args, kwargs, 0, "node")
        self.sink.mark(node.id)
        newer = node.mamba_prev if lru.mamba else None
        if newer is not None:
            self.sink.mark(newer.id)

    def deleting(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `_delete_leaf(node)` / `_delete_tombstone_leaf(node)`."""
        node = _arg(args, kwargs, 0, "node")
        nodes = self.sink.node_map
        if nodes is not None:
            nodes.pop(node.id, None)
        self.sink.mark(node.id)
        self.sink.mark(node.parent.id)

    def locking(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `inc_lock_ref(node)` / `dec_lock_ref(node)`: the lock refs from it to the root."""
        self.sink.mark_path(_arg(args, kwargs, 0, "node"))

    def reset(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """After `reset()`: a new root and no nodes; the next capture walks and reads them all."""
        self.sink.node_map = None
        self.sink.overflow()
