"""Read-only tree view of sglang 0.5.16's UnifiedRadixCache, which keeps its nodes itself.

Chosen by feature detection (`refusal`): a cache with `root_node`, component LRU lists
(`lru_lists`) and a MAMBA component, and no `tree_core` (0.5.17 moved the nodes into
UnifiedTreeCore's arena: adapter_0523). Its UnifiedTreeNode is 0.5.17's Python-core node
(`component_data[FULL|MAMBA]` with value and lock_ref, `key`, `children`, `parent`,
`last_access_time`, `hit_count`; ids from a class counter, so they only grow), and the cache
holds what 0.5.17's core holds (`root_node`, `lru_lists[ct].cache`, `evictable_device_leaves`),
so adapter_0523's PythonTreeView reads its records as they are. What differs: there is no node
arena, so `arena()` walks the tree (a new dict each call: Capture re-reads every node at each
capture, the hooks leaving no dirty marks), and an evicted leaf keeps its parent link, so a node
counts as present only while its parent still lists it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from mcinspect.schema import NodeId, NodeRecord

from .adapter_0523 import PythonTreeView
from .components import MAMBA
from .tree_walk import walked_arena, walked_depths


def refusal(tree_cache: Any) -> str:
    """Why this adapter cannot read `tree_cache`, "" when it can (feature detection)."""
    components = getattr(tree_cache, "components", None)
    shape = all(hasattr(tree_cache, name) for name in ("root_node", "lru_lists", "evictable_device_leaves"))
    if shape and not hasattr(tree_cache, "tree_core") and isinstance(components, dict) and MAMBA in components:
        return ""
    return f"{type(tree_cache).__name__} is not a UnifiedRadixCache keeping its own nodes with a MAMBA component"


def tree_view(tree_cache: Any, sink: Any = None) -> WalkedTreeView:
    """`sink` is not read: 0.5.16 has no dirty-mark hooks (every capture walks the tree)."""
    return WalkedTreeView(tree_cache)


class WalkedTreeView(PythonTreeView):
    """Every node of a UnifiedRadixCache without a tree core (generations.FullTreeView); `core`
    is the cache itself."""

    walked = True

    def __init__(self, cache: Any) -> None:
        super().__init__(cache)
        self._arena: dict[int, Any] = {}

    def arena(self) -> dict[int, Any]:
        """NodeId -> node, ids ascending (the newest last), walked afresh: a new dict each call."""
        self._arena = walked_arena(self.core.root_node)
        return self._arena

    def all_records(self, tombstones: Collection[int]) -> dict[NodeId, NodeRecord]:
        """Every node, depth-first from the root (the walk reaches every node there is)."""
        return {record.id: record for record in self.records(walked_depths(self.core.root_node), tombstones)}

    def node(self, node_id: int) -> Any:
        """The node with this id while its parents still list it up to the root."""
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
