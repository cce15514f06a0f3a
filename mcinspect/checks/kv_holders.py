"""Which tree nodes hold KV tokens in which part of the pool: the nodes a step's freed tokens
could belong to, found without a pass over the tree.

check_kv looks at every unchanged node whenever a step put tokens on the free list (nearly
every step of a busy engine): at 100k nodes that pass was ~15-30 ms of a client's step, more
than some engine steps take. This index maps each BLOCK-token block of the pool to the nodes
with a KV run in it; a `StepView` builds it the first time a check asks (O(the tree's runs))
and hands it to the next view, which updates it by the nodes that changed (O(the change)).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..schema import NodeId, NodeRecord, Runs

BLOCK = 2048
"""Tokens a block: a node's runs touch a few blocks (decode-interleaved rows at page size 1
spread over more), a block holds the runs of a few nodes."""


def _blocks(runs: Runs) -> set[int]:
    return {block for start, length in runs if length > 0 for block in range(start // BLOCK, (start + length - 1) // BLOCK + 1)}


class KvHolders:
    """Block -> the nodes with a KV run in it (mutable: one view chain at a time owns it)."""

    def __init__(self, nodes: Iterable[NodeRecord]) -> None:
        self._holders: dict[int, set[NodeId]] = {}
        for node in nodes:
            self._add(node)

    def candidates(self, tokens: Runs) -> list[NodeId]:
        """The nodes (ascending ids) with a run in a block these token runs touch: every node
        that can hold one of their tokens, and maybe others."""
        found: set[NodeId] = set()
        for block in _blocks(tokens):
            found |= self._holders.get(block, set())
        return sorted(found)

    def moved(self, gone: Iterable[NodeRecord], came: Iterable[NodeRecord]) -> None:
        """Forget the records `gone` (removed nodes, and changed ones as they were), index `came`."""
        for node in gone:
            for block in _blocks(node.kv_runs):
                holders = self._holders.get(block)
                if holders is not None:
                    holders.discard(node.id)
                    if not holders:
                        del self._holders[block]
        for node in came:
            self._add(node)

    def _add(self, node: NodeRecord) -> None:
        for block in _blocks(node.kv_runs):
            self._holders.setdefault(block, set()).add(node.id)
