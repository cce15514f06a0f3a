"""Read-only tree view of sglang 0.5.16's UnifiedRadixCache, which keeps its nodes itself.

Chosen by feature detection (`refusal`): a cache with `root_node`, component LRU lists
(`lru_lists`) and a MAMBA component, and no `tree_core` (0.5.17 moved the nodes into
UnifiedTreeCore's arena: adapter_0523). Its UnifiedTreeNode is 0.5.17's Python-core node
(`component_data[FULL|MAMBA]` with value and lock_ref, `key`, `children`, `parent`,
`last_access_time`, `hit_count`; ids from a class counter, so they only grow), and the cache
holds what 0.5.17's core holds (`root_node`, `lru_lists[ct].cache`, `evictable_device_leaves`),
so adapter_0523's PythonTreeView reads its records as they are. What differs: there is no node
arena. With marks_0516's hooks bound (and the class itself, with no host tier and no components
but FULL and MAMBA), `arena()` is the node map they keep (walked once, and again after a `reset()`) and
Capture reads only the nodes they mark, as on 0.5.23; without them it walks the tree (a new dict
each call: Capture re-reads every node at each capture, O(tree)), and as an evicted leaf keeps
its parent link, a node counts as present only while its parent still lists it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from mcinspect.schema import NodeId, NodeRecord

from .adapter_0523 import PythonTreeView
from .components import FULL, MAMBA
from .event_sink import EventSink
from .tree_walk import arena_of, walked_depths


def refusal(tree_cache: Any) -> str:
    """Why this adapter cannot read `tree_cache`, "" when it can (feature detection)."""
    components = getattr(tree_cache, "components", None)
    shape = all(hasattr(tree_cache, name) for name in ("root_node", "lru_lists", "evictable_device_leaves"))
    if shape and not hasattr(tree_cache, "tree_core") and isinstance(components, dict) and MAMBA in components:
        return ""
    return f"{type(tree_cache).__name__} is not a UnifiedRadixCache keeping its own nodes with a MAMBA component"


def tree_view(tree_cache: Any, sink: EventSink | None = None) -> CacheTreeView:
    return CacheTreeView(tree_cache, sink)


class CacheTreeView(PythonTreeView):
    """Every node of a UnifiedRadixCache without a tree core (generations.FullTreeView); `core`
    is the cache itself."""

    def __init__(self, cache: Any, sink: EventSink | None = None) -> None:
        super().__init__(cache)
        # Only what the marks follow: the host tier and SWA create and change nodes in methods
        # of their own (`_insert_helper_host`, the SWA component's split and values), as a
        # subclass may.
        marked = (
            sink is not None
            and sink.node_map_hooked
            and type(cache).__name__ == "UnifiedRadixCache"
            and getattr(cache, "cache_controller", None) is None
            and set(cache.components) == {FULL, MAMBA}
        )
        self.sink = sink if marked else None
        """The sink whose node map and marks marks_0516's hooks keep (None: walked captures)."""
        self.walked = self.sink is None
        self._arena: dict[int, Any] = {}

    def arena(self) -> dict[int, Any]:
        """NodeId -> node, ids ascending (the newest last). Walked afresh, a new dict, when no
        hooks keep the node map, or when it is to be walked (first, and after a `reset()`);
        else the map they keep, the same dict."""
        self._arena = arena_of(self.core.root_node, self.sink)
        return self._arena

    def all_records(self, tombstones: Collection[int]) -> dict[NodeId, NodeRecord]:
        """Every node, depth-first from the root (the walk reaches every node there is)."""
        return {record.id: record for record in self.records(walked_depths(self.core.root_node), tombstones)}

    def node(self, node_id: int) -> Any:
        """The node with this id while its parents still list it up to the root."""
        if self.sink is not None:  # the hooks drop a node from the map as it leaves the tree
            return self.arena().get(node_id)
        node = self._arena.get(node_id)
        if node is None:
            node = self.arena().get(node_id)
        child = node
        page_size = self.core.page_size
        while child is not None and child.parent is not None:
            if child.parent.children.get(child.key.child_key(page_size)) is not child:
                return None
            child = child.parent
        return node if child is self.core.root_node else None
