"""The radix tree as arrays in breadth-first order, with subtree totals (for folding).

Iterative throughout: a radix tree can be 100k nodes deep.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import CacheState, NodeId


@dataclass(frozen=True)
class Totals:
    """What a set of tree nodes holds."""

    nodes: int = 0
    tokens: int = 0
    """Sum of key lengths."""
    slots: int = 0
    """Nodes holding a mamba slot."""
    locked: int = 0
    """Nodes with a full or mamba lock."""
    flagged: int = 0
    """Nodes named by a violation."""

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.nodes + other.nodes,
            self.tokens + other.tokens,
            self.slots + other.slots,
            self.locked + other.locked,
            self.flagged + other.flagged,
        )


_LANE = 1 << 48
"""Subtree sums are packed into one int per node, lanes (low to high) flagged, locked, slots,
nodes, tokens: one addition per node instead of five keeps a 100k-node tree under 0.1 s."""


def _pack(tokens: int, nodes: int, slots: int, locked: int, flagged: int) -> int:
    return (((tokens * _LANE + nodes) * _LANE + slots) * _LANE + locked) * _LANE + flagged


def _unpack(packed: int) -> Totals:
    rest, flagged = divmod(packed, _LANE)
    rest, locked = divmod(rest, _LANE)
    rest, slots = divmod(rest, _LANE)
    tokens, nodes = divmod(rest, _LANE)
    return Totals(nodes, tokens, slots, locked, flagged)


class TreeIndex:
    """The tree in arrays indexed by position in a breadth-first (parent-first) order, with
    subtree sums.

    Nodes whose parent is missing (hidden by sglang's Rust core, or a bug) are roots; nodes on a
    parent cycle (a bug) are cut loose at the first one met, so every node is counted once.
    """

    def __init__(self, state: CacheState, flagged: set[NodeId]) -> None:
        nodes = state.nodes
        children_of: dict[NodeId, list[NodeId]] = {}
        roots: list[NodeId] = []
        for node_id, record in nodes.items():
            parent = record.parent
            if parent in nodes and parent != node_id:
                kids = children_of.get(parent)
                if kids is None:
                    children_of[parent] = [node_id]
                else:
                    kids.append(node_id)
            else:
                roots.append(node_id)
        ids: list[NodeId] = []
        parent_pos: list[int] = []
        pos: dict[NodeId, int] = {}
        for start in sorted(roots):
            pos[start] = len(ids)
            ids.append(start)
            parent_pos.append(-1)
        head = 0
        while True:
            while head < len(ids):
                kids = children_of.get(ids[head])
                if kids:
                    if len(kids) > 1:
                        kids.sort()
                    for child in kids:
                        if child not in pos:  # only fails on a parent cycle
                            pos[child] = len(ids)
                            ids.append(child)
                            parent_pos.append(head)
                head += 1
            if len(ids) == len(nodes):
                break
            start = min(n for n in nodes if n not in pos)  # a cycle: cut it at its smallest id
            pos[start] = len(ids)
            ids.append(start)
            parent_pos.append(-1)
        self.ids, self.parent, self.pos = ids, parent_pos, pos
        self.children: list[list[int]] = [[] for _ in ids]
        for here in range(1, len(ids)):
            if parent_pos[here] >= 0:
                self.children[parent_pos[here]].append(here)
        self.flagged = [node_id in flagged for node_id in ids] if flagged else [False] * len(ids)
        own = []
        for node_id, is_flagged in zip(ids, self.flagged):
            record = nodes[node_id]
            own.append(_pack(record.key_len, 1, record.mamba_slot != -1, bool(record.full_lock or record.mamba_lock), is_flagged))
        self.own_packed = own
        sub = own[:]
        for here in range(len(ids) - 1, -1, -1):
            up = parent_pos[here]
            if up >= 0:
                sub[up] += sub[here]
        self.sub_packed = sub

    def subtree(self, here: int) -> Totals:
        return _unpack(self.sub_packed[here])

    def own(self, here: int) -> Totals:
        return _unpack(self.own_packed[here])

    def total(self) -> Totals:
        return _unpack(sum(self.sub_packed[h] for h in range(len(self.ids)) if self.parent[h] < 0))
