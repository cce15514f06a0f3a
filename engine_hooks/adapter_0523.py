"""Read-only inspection adapter for sglang 0.5.23's UnifiedRadixCache tree (FULL + MAMBA).

Chosen by feature detection (`refusal`): a `tree_cache.tree_core` and a MAMBA component (and
a Rust core with `collect_path_info`: 0.5.22 on).
Two tree cores exist behind `tree_cache.tree_core`, picked by sglang at start-up
(`SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND`, default `rust`; sglang falls back to `python` for
session radix cache and custom components):

- `PythonTreeView` (`UnifiedTreeCore`): every node, every field of `NodeRecord`. Nodes live in
  the core's arena (`_node_arena`, NodeId -> `UnifiedTreeNode`, insertion-ordered, ids only
  grow); per node `component_data[FULL|MAMBA]` holds the value and lock_ref, `lru_lists[ct].cache`
  the LRU membership, `evictable_device_leaves` the evictable leaves. FULL has no LRU in 0.5.23
  (eviction walks the leaf set), so `in_full_lru` is False on a healthy tree: sglang's own
  sanity check reports a non-empty FULL LRU as an error. `tombstone` is not sglang state: the
  EventSink remembers which nodes lost their mamba value to an eviction, since a split parent
  has none either.
- `RustTreeView` (`RustUnifiedTreeCore`): nodes are hidden (`node_by_id` and `root_node`
  raise NotImplementedError). It shows what the production binding exposes.

What the Rust core cannot show
------------------------------
With `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=rust` (sglang's default), mcinspect sees:

- the nodes on the paths of requests that hold a tree lock (`collect_path_info` on each
  `req.lock.node`): id, parent, depth, key length, FULL KV indices, mamba slot
  (`get_component_device_value`), whether the FULL value was evicted;
- their key tokens, taken from the request's own token ids (the path was matched or inserted
  from them), not from the tree;
- the set of tree-owned mamba slots (`all_mamba_values_flatten`), without their node unless
  the node is on such a path.

It cannot show: nodes off those paths (cached prefixes no running request uses, which is most
of the tree); for any node its lock refs, LRU membership, evictable-leaf membership, last
access time, hit count, or tombstone status (records carry -1 / False / -1.0 there, and
`EngineInfo.full_tree_detail` is False); which node owns a tree slot off those paths (claim
node -1); and node-level changes between steps (there is nothing to hook: the Rust core calls
no Python per node), so each step re-reads the paths instead. Eviction events carry the freed
slots and token counts but no node ids. Set `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python`
in the engine's environment for full detail (the Rust core exists for speed on large trees).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import torch

from mcinspect.schema import INLINE_TOKENS, NodeId, NodeRecord, SlotId, key_hash, pack_tokens

from .components import FULL, MAMBA
from .node_derived import DerivedMemo
from .tensor_runs import ints_of_many, runs_of_many

UNKNOWN = -1
"""Lock refs, hit count and last access of a node the Rust core does not show."""


class UnsupportedCache(Exception):
    """The scheduler's tree cache is not a 0.5.23 UnifiedRadixCache with a MAMBA component."""


def refusal(tree_cache: Any) -> str:
    """Why this adapter cannot read `tree_cache`, "" when it can (feature detection, not
    version strings)."""
    components = getattr(tree_cache, "components", None)
    if not (hasattr(tree_cache, "tree_core") and isinstance(components, dict) and MAMBA in components):
        return f"{type(tree_cache).__name__} is not a UnifiedRadixCache with a MAMBA component"
    if not is_python_core(tree_cache) and not hasattr(tree_cache.tree_core, "collect_path_info"):
        return (
            "this sglang's Rust tree core has no collect_path_info (sglang 0.5.21), so no request path "
            "can be read; set SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python"
        )
    return ""


def is_python_core(tree_cache: Any) -> bool:
    """The Python tree core keeps its nodes in an arena; the Rust core has none."""
    return hasattr(tree_cache.tree_core, "_node_arena")


def tree_view(tree_cache: Any, sink: Any = None) -> PythonTreeView | RustTreeView:
    """The view of `tree_cache`'s core (generations.Generation.tree_view; `sink` is not read:
    the core's own hooks mark its nodes, and it keeps them in its arena)."""
    core = tree_cache.tree_core
    return PythonTreeView(core) if is_python_core(tree_cache) else RustTreeView(core)


def node_end(record: NodeRecord) -> int:
    """Tokens from the root to the end of the node's key: where its mamba state sits."""
    return record.depth + record.key_len


class PythonTreeView:
    """Every node of sglang's Python `UnifiedTreeCore`."""

    full_detail = True
    walked = False

    def __init__(self, tree_core: Any) -> None:
        self.core = tree_core
        self._derived = DerivedMemo(_values, _raw_tokens)
        """Per node recently read: what its key and values gave (see `records`)."""

    def arena(self) -> dict[int, Any]:
        """NodeId -> node. Re-read each time: `reset()` replaces the dict."""
        return self.core._node_arena

    def all_records(self, tombstones: Collection[int]) -> dict[NodeId, NodeRecord]:
        """Every node, depth-first from the root (iterative: trees can be deep)."""
        root = self.core.root_node
        items: list[tuple[Any, int]] = []
        stack = [(root, 0)]
        while stack:
            node, depth = stack.pop()
            items.append((node, depth))
            child_depth = depth + len(node.key)
            for child in node.children.values():
                stack.append((child, child_depth))
        # Nodes in the arena but off the root's tree would be a bug; show them anyway.
        if len(items) != len(self.arena()):
            seen = {node.id for node, _ in items}
            known = {node.id: depth for node, depth in items}
            for node in self.arena().values():
                if node.id not in seen:
                    items.append((node, depth_of(node, known.get)))
        return {record.id: record for record in self.records(items, tombstones)}

    def records(self, items: Sequence[tuple[Any, int]], tombstones: Collection[int], *, once: bool = False) -> list[NodeRecord]:
        """NodeRecords for (node, depth) pairs; one device copy for all their values.

        A step re-reads mostly the same few nodes (a lock moved along a path), a walked tree all
        of them: a node whose key and values are the objects its last read saw keeps what they
        gave (KV runs, slot, tokens, key hash: node_derived.py); `once`: not remembered."""
        if not items:
            return []
        core = self.core
        root = core.root_node
        leaves = core.evictable_device_leaves
        full_lru = core.lru_lists[FULL].cache
        mamba_lru = core.lru_lists[MAMBA].cache
        derived = self._derived.derive([node for node, _ in items], whole_tree=self.walked, remember=not once)
        out = []
        for (node, depth), known in zip(items, derived):
            full = node.component_data[FULL]
            mamba = node.component_data[MAMBA]
            out.append(
                NodeRecord(
                    id=NodeId(node.id),
                    parent=NodeId(node.parent.id if node.parent is not None else -1),
                    depth=depth,
                    key_len=known.key_len,
                    tokens=known.tokens,
                    key_hash=known.key_hash,
                    kv_runs=known.kv_runs,
                    kv_evicted=node is not root and full.value is None,
                    mamba_slot=SlotId(known.slot),
                    full_lock=full.lock_ref,
                    mamba_lock=mamba.lock_ref,
                    in_full_lru=node.id in full_lru,
                    in_mamba_lru=node.id in mamba_lru,
                    evictable=node in leaves,
                    last_access=float(node.last_access_time),
                    hit_count=node.hit_count,
                    tombstone=mamba.value is None and node.id in tombstones,
                )
            )
        return out

    def node(self, node_id: int) -> Any:
        """The node with this id while it is in the tree, else None."""
        return self.core._node_arena.get(node_id)

    def slot_of(self, node_id: int) -> int | None:
        """The mamba slot node `node_id` holds now; None when it is gone or holds none."""
        node = self.node(node_id)
        if node is None:
            return None
        value = node.component_data[MAMBA].value
        return int(value.reshape(-1)[0]) if value is not None and value.numel() else None

    def state_nodes(self) -> list[int]:
        """Every node holding a mamba state."""
        nodes = [node for node in self.arena().values() if node.component_data[MAMBA].value is not None]
        return [node.id for node in nodes]

    def path_tokens(self, node_id: int) -> list[int] | None:
        """The token ids from the root to the end of node `node_id`'s key."""
        node = self.node(node_id)
        if node is None:
            return None
        keys = []
        while node.parent is not None:
            keys.append(node.key.raw_token_ids())
            node = node.parent
        return [token for key in reversed(keys) for token in key]


def _values(node: Any) -> tuple[Any, Any, Any]:
    data = node.component_data
    return node.key, data[FULL].value, data[MAMBA].value


def _raw_tokens(key: Any) -> Any:
    return key.raw_token_ids()


def depth_of(node: Any, known: Callable[[int], int | None], memo: dict[int, int] | None = None) -> int:
    """Tokens from the root to `node`'s key start, walking up only to the nearest node whose
    depth is `known` (a node's depth changes only when it is the child half of a split)."""
    memo = {} if memo is None else memo
    chain = []
    current = node
    while True:
        if current.id in memo:
            depth = memo[current.id]
            break
        if current.parent is None:
            depth = 0
            break
        cached = known(current.id)
        if cached is not None:
            depth = cached
            break
        chain.append(current)
        current = current.parent
    memo[current.id] = depth
    for below in reversed(chain):
        depth += len(below.parent.key)
        memo[below.id] = depth
    return depth


class RustTreeView:
    """What sglang's `RustUnifiedTreeCore` exposes: request paths and tree-owned slots."""

    full_detail = False

    def __init__(self, tree_core: Any) -> None:
        self.core = tree_core

    def tree_slots(self) -> torch.Tensor:
        """Every mamba slot some node holds (`all_mamba_values_flatten`), int64 on the CPU."""
        return self.core.all_mamba_values_flatten().reshape(-1).to("cpu", torch.int64)

    def slot_of(self, node_id: int) -> int | None:
        """The mamba slot node `node_id` holds now (the binding resolves any live id)."""
        try:
            value = self.core.get_component_device_value(node_id, MAMBA)
        except Exception:  # noqa: BLE001  an id the binding no longer knows (evicted)
            return None
        return int(value.reshape(-1)[0]) if value is not None and value.numel() else None

    def path_tokens(self, node_id: int) -> list[int] | None:
        """Keys are hidden in the Rust core: the verifier uses the tokens recorded at insert."""
        return None

    def state_nodes(self) -> list[int]:
        """Nodes are hidden in the Rust core: the verifier knows the ones it saw inserted."""
        return []

    def path_records(self, anchors: Iterable[tuple[int, Sequence[int]]]) -> dict[NodeId, NodeRecord]:
        """The nodes from the root to each anchor node, keyed by id.

        `anchors`: (node id, token ids of the request whose path it is). Pass only nodes that
        a request's tree lock keeps alive: the binding cannot resolve evicted ids.
        """
        root_id = self.core.root_node_handle()
        tokens_of: dict[int, Sequence[int]] = {}
        for node_id, tokens in anchors:
            if node_id != root_id:
                tokens_of.setdefault(node_id, tokens)
        infos: dict[int, tuple[Any, Sequence[int]]] = {}
        ends = list(tokens_of)
        for end, path in zip(ends, self.core.collect_path_info(ends)):
            for info in path:
                infos.setdefault(info.node_id, (info, tokens_of[end]))
        ids = list(infos)
        kv_runs = runs_of_many([self.core.get_component_device_value(i, FULL) for i in ids])
        slots = ints_of_many([self.core.get_component_device_value(i, MAMBA) for i in ids])
        out = {NodeId(root_id): _path_record(root_id, -1, 0, 0, [], [], -1, False)}
        for node_id, runs, slot in zip(ids, kv_runs, slots):
            info, tokens = infos[node_id]
            key = tokens[info.path_start : info.path_end]
            out[NodeId(node_id)] = _path_record(
                node_id,
                info.parent_id,
                info.path_start,
                info.path_end - info.path_start,
                key,
                runs,
                slot[0] if slot else -1,
                info.full_value_len is None,
            )
        return out


def _path_record(
    node_id: int, parent: int, depth: int, key_len: int, key: Sequence[int], runs: list, slot: int, evicted: bool
) -> NodeRecord:
    """A node as the Rust core shows it: structure and values, no lock / LRU / access detail."""
    return NodeRecord(
        id=NodeId(node_id),
        parent=NodeId(parent),
        depth=depth,
        key_len=key_len,
        tokens=pack_tokens(list(key[:INLINE_TOKENS])),
        key_hash=key_hash(list(key)),
        kv_runs=runs,
        kv_evicted=evicted,
        mamba_slot=SlotId(slot),
        full_lock=UNKNOWN,
        mamba_lock=UNKNOWN,
        in_full_lru=False,
        in_mamba_lru=False,
        evictable=False,
        last_access=float(UNKNOWN),
        hit_count=UNKNOWN,
        tombstone=False,
    )
