"""node_derived.DerivedMemo: what it remembers across reads, and how it forgets (the oldest first,
as many a read as it adds: forgetting all at once freed 4096 nodes' fields in one call)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from mcinspect_engine_hooks.node_derived import REMEMBERED_NODES, REUSE_NODES, DerivedMemo


class Counted:
    """A memo over nodes with real tensor values, counting the nodes derived afresh."""

    def __init__(self, count: int) -> None:
        self.nodes = [
            SimpleNamespace(id=i, key=[i, i + 1], full=torch.tensor([2 * i, 2 * i + 1]), mamba=torch.tensor([i])) for i in range(count)
        ]
        self.derived = 0
        self.memo = DerivedMemo(lambda node: (node.key, node.full, node.mamba), self._tokens)

    def _tokens(self, key: Any) -> list[int]:
        self.derived += 1
        return key

    def read(self, ids: range) -> int:
        """Nodes derived afresh by a read of `ids`, in reads of at most REUSE_NODES."""
        before = self.derived
        for start in range(ids.start, ids.stop, REUSE_NODES):
            self.memo.derive(self.nodes[start : min(start + REUSE_NODES, ids.stop)])
        return self.derived - before


def test_a_full_memo_forgets_only_as_many_of_its_oldest_nodes_as_a_read_adds() -> None:
    counted = Counted(REMEMBERED_NODES + 64)
    assert counted.read(range(REMEMBERED_NODES)) == REMEMBERED_NODES
    assert counted.read(range(REMEMBERED_NODES, REMEMBERED_NODES + 64)) == 64
    # The 64 oldest made room; every other node is still remembered.
    assert counted.read(range(64, REMEMBERED_NODES)) == 0
    assert counted.read(range(64)) == 64


def test_a_node_derived_again_counts_as_new_and_its_fields_follow_its_new_objects() -> None:
    counted = Counted(REMEMBERED_NODES + 6)
    counted.read(range(REMEMBERED_NODES))
    node = counted.nodes[5]
    node.mamba = torch.tensor([99])  # sglang binds a new value object: derived again
    assert counted.read(range(5, 6)) == 1
    assert counted.memo.derive([node])[0].slot == 99
    # Node 5 is now the newest: the 6 nodes added next push out nodes 0-4 and 6, not node 5.
    assert counted.read(range(REMEMBERED_NODES, REMEMBERED_NODES + 6)) == 6
    assert counted.read(range(5, 6)) == 0
    assert counted.read(range(6, 7)) == 1


def test_nodes_read_once_are_derived_but_neither_remembered_nor_pushing_others_out() -> None:
    counted = Counted(REMEMBERED_NODES + 64)
    counted.read(range(REMEMBERED_NODES))
    fresh = counted.nodes[REMEMBERED_NODES:]
    assert [d.slot for d in counted.memo.derive(fresh, remember=False)] == list(range(REMEMBERED_NODES, REMEMBERED_NODES + 64))
    assert counted.derived == REMEMBERED_NODES + 64
    assert counted.read(range(REMEMBERED_NODES)) == 0
    assert counted.read(range(REMEMBERED_NODES, REMEMBERED_NODES + 64)) == 64
