"""Invariants 6 and 8: lock refs add up, and the tree is a well-formed radix tree whose
mamba-bearing nodes keep their KV and sit in the mamba LRU.

Nothing here recurses: every rule relates a node to its parent or to its children (depth
strictly grows down a parent chain whose keys are non-empty, so checking each node against its
parent also rules out cycles). Only nodes that changed since the previous boundary, and their
neighbours, are looked at.
"""

from __future__ import annotations

from ..schema import InsertEvent, NodeId, NodeRecord
from .history import StepView
from .violation import Violation

SHAPE = "tree-shape"
LOCKS = "locks"


def node_end(node: NodeRecord) -> int:
    """Tokens from the root to the end of the node's key: where its mamba state sits."""
    return node.depth + node.key_len


def check_shape(view: StepView) -> list[Violation]:
    """Parent links, depths, keys, KV presence and mamba LRU membership of changed nodes."""
    state, step = view.state, view.step
    nodes = state.nodes
    root = view.root
    out: list[Violation] = []

    def flag(node: NodeRecord, reason: str, *others: NodeId) -> None:
        slots = (node.mamba_slot,) if node.mamba_slot >= 0 else ()
        out.append(Violation(check=SHAPE, step=step, nodes=(node.id, *others), slots=slots, reason=f"node {node.id} {reason}"))

    for node in _shape_candidates(view):
        if node is root:
            continue
        parent = nodes.get(node.parent)
        if node.parent < 0:
            flag(node, f"is a second root (the root is node {root.id if root else -1})")
            continue
        if parent is None:
            flag(node, f"has parent {node.parent}, which is not in the tree")
            continue
        if node.key_len <= 0:
            flag(node, "has an empty key: a ghost node (#35821)", parent.id)
        if node.depth != node_end(parent):
            flag(node, f"starts at depth {node.depth} but its parent {parent.id} ends at {node_end(parent)}", parent.id)
        kv_tokens = sum(length for _, length in node.kv_runs)
        if not node.kv_evicted and kv_tokens != node.key_len:
            flag(node, f"has {kv_tokens} KV tokens for a key of {node.key_len}")
        if not node.kv_evicted and parent is not root and parent.kv_evicted:
            flag(node, f"keeps its KV but its parent {parent.id} was evicted", parent.id)
        if node.mamba_slot >= 0 and node.kv_evicted:
            flag(node, f"holds slot {node.mamba_slot} but its KV was evicted")
        if view.detailed and node.in_mamba_lru != (node.mamba_slot >= 0):
            held = f"holds slot {node.mamba_slot}" if node.mamba_slot >= 0 else "holds no mamba state"
            flag(node, f"{held} but is {'' if node.in_mamba_lru else 'not '}in the mamba LRU")
    out += _split_parents(view)
    return out


def _shape_candidates(view: StepView) -> list[NodeRecord]:
    """Changed nodes, plus children of removed nodes and of nodes whose key end moved (the
    children's own records may not have changed, but their relation to the parent did)."""
    candidates = list(view.changed_nodes)
    previous = view.previous
    if previous is None:
        return candidates
    touched = {node.id for node in view.removed_nodes}
    for node in view.changed_nodes:
        before = previous.nodes.get(node.id)
        if before is not None and node_end(before) != node_end(node):
            touched.add(node.id)
    if touched:
        seen = {node.id for node in candidates}
        for parent_id in touched:
            candidates += [child for child in view.children.of(parent_id) if child.id not in seen]
    return candidates


def _split_parents(view: StepView) -> list[Violation]:
    """A node created by a split takes no mamba state from its child (sglang's
    `redistribute_on_node_split` sets it None); only an insert in the same step may give it one."""
    previous = view.previous
    if previous is None:
        return []
    nodes = view.state.nodes
    inserted = {event.node for event in view.events if isinstance(event, InsertEvent)}
    out = []
    for child in view.changed_nodes:
        before = previous.nodes.get(child.id)
        if before is None or before.parent == child.parent or child.parent in previous.nodes:
            continue
        parent = nodes.get(child.parent)
        if parent is not None and parent.mamba_slot >= 0 and parent.id not in inserted:
            out.append(
                Violation(
                    check=SHAPE,
                    step=view.step,
                    nodes=(parent.id, child.id),
                    slots=(parent.mamba_slot,),
                    reason=f"node {parent.id}, split off above node {child.id}, holds slot {parent.mamba_slot} that no insert gave it",
                )
            )
    return out


def check_locks(view: StepView) -> list[Violation]:
    """For each node whose locks may have moved: the FULL lock counts every lock in its subtree
    (so full - sum(children's full) = locks anchored at the node, >= 0), at most that many are
    MAMBA locks, and at least that many live requests are anchored there.

    Not checked for equality: sglang also holds locks no request shows (HiCache write-through,
    streaming sessions, in-flight load-backs), and releases MAMBA locks early on purpose
    (`SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`, extra_buffer_lazy after prefill), so "anchored ==
    live requests" and "mamba == live requests" would flag clean runs.
    """
    if not view.detailed:
        return []  # the Rust tree core shows no lock refs
    state, step = view.state, view.step
    nodes = state.nodes
    anchored_requests: dict[NodeId, list[str]] = {}
    for request in view.live.values():
        anchored_requests.setdefault(request.last_node, []).append(request.rid)
    candidates = _lock_candidates(view)
    if not candidates:
        return []
    children = view.children
    out: list[Violation] = []
    for node_id in candidates:
        node = nodes.get(node_id)
        if node is None or node.parent < 0:
            continue  # gone, or the root (its lock refs are sglang's permanent 1)
        below = sum(child.full_lock for child in children.of(node_id))
        anchored = node.full_lock - below
        holders = anchored_requests.get(node_id, [])
        ids = dict(nodes=(node_id,), rids=tuple(holders))
        if node.full_lock < 0 or node.mamba_lock < 0:
            out.append(
                Violation(
                    check=LOCKS,
                    step=step,
                    reason=f"node {node_id} has negative lock refs (full {node.full_lock}, mamba {node.mamba_lock})",
                    **ids,
                )
            )
        elif anchored < 0:
            out.append(
                Violation(
                    check=LOCKS,
                    step=step,
                    reason=f"node {node_id} has full lock {node.full_lock} but its children hold {below}: a lock was released twice or taken without its path",
                    **ids,
                )
            )
        elif node.mamba_lock > anchored:
            out.append(
                Violation(
                    check=LOCKS,
                    step=step,
                    reason=f"node {node_id} has mamba lock {node.mamba_lock} but only {anchored} lock(s) anchored there (full {node.full_lock} - children {below})",
                    **ids,
                )
            )
        elif len(holders) > anchored:
            out.append(
                Violation(
                    check=LOCKS,
                    step=step,
                    reason=f"node {node_id} has {anchored} lock(s) anchored but {len(holders)} live request(s) are anchored there ({', '.join(holders)}): a lock is missing",
                    **ids,
                )
            )
    return out


def _lock_candidates(view: StepView) -> set[NodeId]:
    """Nodes whose anchored lock count may have changed: changed nodes and their parents,
    parents of removed nodes, and the anchors of requests that changed."""
    candidates: set[NodeId] = set()
    for node in view.changed_nodes:
        candidates.add(node.id)
        candidates.add(node.parent)
    candidates.update(node.parent for node in view.removed_nodes)
    candidates.update(request.last_node for request in view.changed_requests)
    previous = view.previous
    if previous is not None:
        # A request that left (finished, retracted) released its anchor's lock.
        candidates.update(r.last_node for rid, r in previous.requests.items() if rid not in view.state.requests)
    candidates.discard(NodeId(-1))
    return candidates
