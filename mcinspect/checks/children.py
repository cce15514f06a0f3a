"""Each node's children, for the checks that look below a changed node (locks, tree shape).

Built at a view's first ask (O(the tree)) and handed from view to view, updated by the nodes
each step changed: a pass over the tree at every step whose nodes changed was ~60 ms of a
client's step at 100k nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..schema import NodeId, NodeRecord


class Children:
    """Parent id -> its children's records (mutable: one view chain at a time owns it)."""

    def __init__(self, nodes: Iterable[NodeRecord]) -> None:
        self._of: dict[NodeId, dict[NodeId, NodeRecord]] = {}
        for node in nodes:
            self._of.setdefault(node.parent, {})[node.id] = node

    def of(self, parent: NodeId) -> Collection[NodeRecord]:
        """The children of `parent` (none: empty)."""
        kids = self._of.get(parent)
        return kids.values() if kids is not None else ()

    def moved(self, gone: Iterable[NodeRecord], came: Iterable[NodeRecord]) -> None:
        """Forget the records `gone` (removed nodes, and changed ones as they were), index `came`."""
        for node in gone:
            kids = self._of.get(node.parent)
            if kids is not None and kids.pop(node.id, None) is not None and not kids:
                del self._of[node.parent]
        for node in came:
            self._of.setdefault(node.parent, {})[node.id] = node
