"""Node-level dirty marks for sglang 0.5.16's UnifiedRadixCache, which keeps its nodes itself
(no tree core, no node arena): with hooks_0516's `MARKS` rows these bodies keep the cache's
nodes by id (`EventSink.node_map`) and, with 0.5.23's "tree.*" bodies on the same methods the
0.5.17 tree core took over, mark the nodes whose records may have changed, so that a capture
reads the marked nodes, not the tree.

Nodes enter the tree only through `_add_new_node` (an insert's new leaf) and `_split_node` (a
split's new parent), and leave it only through `_remove_leaf_from_parent`; the HiCache host
insert (`_insert_helper_host`) and a SWA component also create and change nodes, so a cache
with a host tier or with components other than FULL and MAMBA is walked (adapter_0516).

Two methods 0.5.23 marks from need no row here (a capture reads a node once, at the step's
end, however many times it was marked): a state given to a node
(`MambaComponent.commit_insert_component_data`) goes to the insert's last node, which its walk
touched (`_touch_node`) or a split or `_add_new_node` made; and every
`_evict_component_and_detach_lru` is followed by `_update_evictable_leaf_sets` of the same node
(`_cascade_evict`) or its removal from the tree.
"""

from __future__ import annotations

from typing import Any

from .event_sink import EventSink
from .events_0516 import _arg


class Marks0516:
    """Bodies of the "marks0516.*" rows: run at every step (a mark missed is a stale record)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    def created(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """After `_add_new_node` / `_split_node`, which return the new node: kept at the map's
        end (ids only grow: Capture reads the tail it has not seen). Both also pass it, and
        what else they change (the parent, the split child), through `_update_evictable_leaf_sets`."""
        nodes = self.sink.node_map
        if nodes is not None and ret is not None:
            nodes[ret.id] = ret

    def leaving(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `_remove_leaf_from_parent(node)`: it leaves the map and is marked (read as
        gone). Its parent needs no mark: both callers pass it to `_update_evictable_leaf_sets` next."""
        node = _arg(args, kwargs, 0, "node")
        nodes = self.sink.node_map
        if nodes is not None:
            nodes.pop(node.id, None)
        self.sink.mark(node.id)

    def matched(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """After `_match_post_processor(params, value, best_match_node, ...)`: it stamped the
        last access from that node up to the root."""
        self.sink.mark_path(_arg(args, kwargs, 2, "best_match_node"))
