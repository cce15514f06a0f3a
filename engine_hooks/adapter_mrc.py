"""Read-only tree view of sglang's MambaRadixCache (the hybrid models' cache up to 0.5.15).

Chosen by feature detection (`supports`): a `root_node` and the two LRU lists
(`full_lru_list`, `mamba_lru_list`), no `tree_core`. Its TreeNode keeps everything on itself:
`value` (KV indices; the root's is `[]`), `mamba_value` (one slot id, None for a tombstone or
a split parent), `full_lock_ref` / `mamba_lock_ref`, `last_access_time`, `hit_count`, and the
links of both LRU lists (`prev`/`next`, `mamba_prev`/`mamba_next`; `LRUList.cache` is id ->
node). Ids come from a class counter (only grow). Unlike 0.5.23's core there is no node
arena: with mrc_marks' hooks bound (and the class itself, not HiMambaRadixCache), `arena()` is the node map they keep (walked once, and again
after a `reset()`) and Capture reads only the nodes they mark, as on 0.5.23; without them it
walks the tree, and Capture re-reads every node at each capture (O(tree)). A record is
`evictable` when sglang's eviction could take it now (an unlocked leaf; MRC keeps no leaf set).

Each record names its next less recently used neighbour of the mamba LRU list
(`mamba_lru_older`), for the `mamba-lru` check: sglang evicts in that order and asserts it
matches `last_access_time` only in its debug sanity check (#12007).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from mcinspect.schema import NodeId, NodeRecord, SlotId

from .event_sink import EventSink
from .node_derived import DerivedMemo
from .req_kv import key_tokens
from .tree_walk import arena_of, walked_depths


def refusal(tree_cache: Any) -> str:
    """Why this adapter cannot read `tree_cache`, "" when it is a MambaRadixCache (feature
    detection, not version strings). 0.5.16-0.5.20 still ship the class, so their methods fit
    this generation while the scheduler builds a UnifiedRadixCache."""
    if all(hasattr(tree_cache, name) for name in ("root_node", "full_lru_list", "mamba_lru_list")) and not hasattr(tree_cache, "tree_core"):
        return ""
    from .generations import installed_release

    return (
        f"sglang {installed_release()} is not supported by mcinspect: the scheduler's cache is a "
        f"{type(tree_cache).__name__}, not the MambaRadixCache whose methods this sglang still has, and the "
        "unified-tree-core generation lacks some of its methods (`mcinspect hooks` lists them). The hooks stay off"
    )


def tree_view(tree_cache: Any, sink: EventSink | None = None) -> MrcTreeView:
    return MrcTreeView(tree_cache, sink)


class MrcTreeView:
    """Every node of a MambaRadixCache (generations.FullTreeView)."""

    full_detail = True

    def __init__(self, cache: Any, sink: EventSink | None = None) -> None:
        self.cache = cache
        # The class itself only: a subclass (HiMambaRadixCache's host tier) moves and deletes
        # nodes in methods of its own, which the marks do not hook.
        marked = sink is not None and sink.node_map_hooked and type(cache).__name__ == "MambaRadixCache"
        self.sink = sink if marked else None
        """The sink whose node map and marks mrc_marks' hooks keep (None: walked captures)."""
        self.walked = self.sink is None
        self._arena: dict[int, Any] = {}
        self._derived = DerivedMemo(_values, _tokens)

    def arena(self) -> dict[int, Any]:
        """NodeId -> node, ids ascending (the newest last). Walked afresh, a new dict, when no
        hooks keep the node map, or when it is to be walked (first, and after a `reset()`);
        else the map they keep, the same dict, with the root marked (its last access moves
        with every match and insert, which mark no node of the root's own)."""
        self._arena = arena_of(self.cache.root_node, self.sink)
        if self.sink is not None:
            self.sink.mark(self.cache.root_node.id)
        return self._arena

    def all_records(self, tombstones: Collection[int]) -> dict[NodeId, NodeRecord]:
        """Every node, depth-first from the root."""
        return {record.id: record for record in self.records(walked_depths(self.cache.root_node), tombstones)}

    def records(self, items: Sequence[tuple[Any, int]], tombstones: Collection[int], *, once: bool = False) -> list[NodeRecord]:
        """NodeRecords for (node, depth) pairs; one device copy for all their values; `once`: what
        their keys and values gave is not remembered."""
        cache = self.cache
        root = cache.root_node
        full_lru = cache.full_lru_list.cache
        mamba_lru = cache.mamba_lru_list.cache
        oldest_end = cache.mamba_lru_list.tail
        # What a node's key and values gave is kept while they are the same objects.
        derived = self._derived.derive([node for node, _ in items], whole_tree=self.walked, remember=not once)
        out = []
        for (node, depth), known in zip(items, derived):
            out.append(
                NodeRecord(
                    id=NodeId(node.id),
                    parent=NodeId(node.parent.id if node.parent is not None else -1),
                    depth=depth,
                    key_len=known.key_len,
                    tokens=known.tokens,
                    key_hash=known.key_hash,
                    kv_runs=known.kv_runs,
                    kv_evicted=node is not root and node.value is None,
                    mamba_slot=SlotId(known.slot),
                    full_lock=node.full_lock_ref,
                    mamba_lock=node.mamba_lock_ref,
                    in_full_lru=node.id in full_lru,
                    in_mamba_lru=node.id in mamba_lru,
                    evictable=node is not root and not node.children and node.full_lock_ref == 0,
                    last_access=float(node.last_access_time),
                    hit_count=node.hit_count,
                    tombstone=node.mamba_value is None and node.id in tombstones,
                    mamba_lru_older=NodeId(_older(node, mamba_lru, oldest_end)),
                )
            )
        return out

    def _live(self, node_id: int) -> Any:
        """The node with this id if it is still in the tree (a deleted leaf keeps its values)."""
        if self.sink is not None:  # the hooks drop a node from the map as it leaves the tree
            nodes = self.sink.node_map
            return (self.arena() if nodes is None else nodes).get(node_id)
        node = self._arena.get(node_id)
        if node is None:
            node = self.arena().get(node_id)
        child = node
        while child is not None and child.parent is not None:
            if child.parent.children.get(self._child_key(child.key)) is not child:
                return None
            child = child.parent
        return node if child is self.cache.root_node else None

    def _child_key(self, key: Any) -> Any:
        """The key a node is filed under in its parent's children (0.5.10's RadixKey has no
        `child_key`: the cache's own `get_child_key_fn`)."""
        if hasattr(key, "child_key"):
            return key.child_key(self.cache.page_size)
        return self.cache.get_child_key_fn(key)

    def slot_of(self, node_id: int) -> int | None:
        node = self._live(node_id)
        value = None if node is None else node.mamba_value
        return int(value.reshape(-1)[0]) if value is not None and value.numel() else None

    def state_nodes(self) -> list[int]:
        return [node.id for node in self.arena().values() if node.mamba_value is not None]

    def path_tokens(self, node_id: int) -> list[int] | None:
        node = self._live(node_id)
        if node is None:
            return None
        keys = []
        while node.parent is not None:
            keys.append(list(key_tokens(node.key)))
            node = node.parent
        return [token for key in reversed(keys) for token in key]


def _values(node: Any) -> tuple[Any, Any, Any]:
    """(key, KV value: none for the root, whose value is a list, mamba value)."""
    return node.key, None if node.parent is None else node.value, node.mamba_value


def _tokens(key: Any) -> list[int]:
    return list(key_tokens(key))


def _older(node: Any, members: dict[int, Any], tail: Any) -> int:
    """The id after `node` toward the list's least recently used end (`mamba_next`), or -1."""
    if node.id not in members:
        return -1
    after = node.mamba_next
    return -1 if after is None or after is tail else int(after.id)
