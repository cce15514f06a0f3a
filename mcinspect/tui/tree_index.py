"""Children per tree node, built once and then patched frame to frame.

A full build over 100k nodes costs ~50-70 ms (one small list per parent); consecutive frames
share almost every NodeRecord (records are immutable and replaced when they change), so the next
frame's index is the previous one patched for the records that differ: ~10 ms for the identity
scan. Anything unusual (orphans, removed parents) falls back to a full build.
"""

from __future__ import annotations

import bisect

from ..schema import NodeId, NodeRecord
from .gc_tuning import gc_paused
from .source import NodeChanges

ROOT_PARENT = NodeId(-1)
"""Parent id given to nodes whose parent is not in the state (the root, orphans)."""

ChildIndex = dict[NodeId, tuple[NodeId, ...]]
"""Sorted child ids per parent id. Tuples: immutable, so frames share them safely, and the
cyclic GC stops tracking tuples of ints, so 100k of them do not slow every full collection."""


def build_children(nodes: dict[NodeId, NodeRecord]) -> ChildIndex:
    """The index from scratch."""
    lists: dict[NodeId, list[NodeId]] = {}
    with gc_paused():
        for node in nodes.values():
            parent = node.parent if node.parent in nodes else ROOT_PARENT
            siblings = lists.get(parent)
            if siblings is None:
                lists[parent] = [node.id]
            else:
                siblings.append(node.id)
        # sorted(): nearly sorted already (dict order follows creation), so linear
        return {parent: tuple(sorted(siblings)) for parent, siblings in lists.items()}


def changed_nodes(old: dict[NodeId, NodeRecord], new: dict[NodeId, NodeRecord]) -> tuple[list[NodeRecord], set[NodeId]]:
    """Records in `new` that are not in `old` (added or replaced), and the ids `new` dropped.

    Identity, not equality: records are replaced when they change. This scan is the floor of a
    frame's cost (~10 ms at 100k nodes); a source that exposed its deltas could skip it.
    """
    changed = [node_id for node_id, node in new.items() if old.get(node_id) is not node]
    added = sum(1 for node_id in changed if node_id not in old)
    removed = {node_id for node_id in old if node_id not in new} if len(old) + added != len(new) else set()
    return [new[node_id] for node_id in changed], removed


def node_changes(
    old: dict[NodeId, NodeRecord], new: dict[NodeId, NodeRecord], changes: NodeChanges | None
) -> tuple[list[NodeRecord], set[NodeId]]:
    """`changed_nodes`, from the frame's own delta when the source knows it (no scan)."""
    if changes is None:
        return changed_nodes(old, new)
    changed = [new[node_id] for node_id in changes.upserted if node_id in new]
    removed = {node_id for node_id in changes.removed if node_id in old and node_id not in new}
    return changed, removed


def patch_children(
    old_nodes: dict[NodeId, NodeRecord],
    old_index: ChildIndex,
    nodes: dict[NodeId, NodeRecord],
    changes: NodeChanges | None = None,
) -> ChildIndex | None:
    """`old_index` moved to `nodes`; None when only a full build gets it right.

    `changes`, when the source knows them (the delta between the two frames), replace the scan.
    """
    if old_nodes is nodes:
        return old_index
    if any(old_nodes[top].parent != ROOT_PARENT for top in old_index.get(ROOT_PARENT, ())):
        return None  # orphans in the old frame: a new node may be their missing parent
    changed, removed = node_changes(old_nodes, nodes, changes)
    for node_id in removed:
        for child in old_index.get(node_id, ()):
            if child not in removed and (child not in nodes or nodes[child].parent == node_id):
                return None  # a removed node whose children stay under it: they became orphans
    edited: dict[NodeId, list[NodeId]] = {}

    def siblings_of(parent: NodeId) -> list[NodeId]:
        if parent not in edited:
            edited[parent] = list(old_index.get(parent, ()))
        return edited[parent]

    for node_id in removed:
        old = old_nodes[node_id]
        siblings_of(old.parent if old.parent in old_nodes else ROOT_PARENT).remove(node_id)
    for node in changed:
        if node.parent not in nodes and node.parent != ROOT_PARENT:
            return None  # an orphan: its place depends on nodes it does not name
        old = old_nodes.get(node.id)
        if old is not None and old.parent == node.parent:
            continue
        if old is not None:
            siblings_of(old.parent if old.parent in old_nodes else ROOT_PARENT).remove(node.id)
        bisect.insort(siblings_of(node.parent), node.id)
    if not edited:  # no node added, removed or moved: the same index, without copying 100k entries
        return old_index
    index = dict(old_index)
    for node_id in removed:
        index.pop(node_id, None)
    for parent, siblings in edited.items():
        if siblings and parent not in removed:
            index[parent] = tuple(siblings)
        else:
            index.pop(parent, None)
    return index
