"""What a tree node's key and values give a NodeRecord (key length, inline tokens, key hash, KV
runs, mamba slot), remembered per node while its key and value objects stay the same: sglang
never edits them in place (a split, an insert, an eviction binds new ones), so the same objects
give the same fields. Shared by the views of every generation (adapter_0523, adapter_mrc)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from mcinspect.schema import INLINE_TOKENS, key_hash, pack_tokens

from .tensor_runs import FrozenRuns, ints_of_many, runs_of_many

REUSE_NODES = 256
"""Reads of up to this many nodes (a step's) reuse and remember what nodes' values gave."""
REMEMBERED_NODES = 4096
"""Nodes remembered at most (their key and value objects are held), the oldest forgotten first,
as many a read as it adds: forgotten all at once, freeing them was a 4 ms call every 64 chunks
of a 100k-node catch-up. A walked tree (read whole at each capture) of up to this many nodes
reuses for its whole reads."""

Values = Callable[[Any], tuple[Any, Any, Any]]
"""A node's (key, KV value, mamba value): the objects its derived fields come from."""
Tokens = Callable[[Any], Sequence[int]]
"""A key's token ids."""


class Derived(NamedTuple):
    """What a node's key and values gave, with those objects (compared by identity)."""

    key: Any
    full: Any
    mamba: Any
    key_len: int
    tokens: bytes
    key_hash: int
    kv_runs: FrozenRuns
    slot: int


def derive_all(nodes: Sequence[Any], values: Values, tokens_of: Tokens) -> list[Derived]:
    """Key tokens, key hash, KV runs and mamba slot of each node; one device copy for all."""
    if not nodes:
        return []
    parts = [values(node) for node in nodes]
    kv_runs = runs_of_many([full for _, full, _ in parts])
    slots = ints_of_many([mamba for _, _, mamba in parts])
    out = []
    for (key, full, mamba), runs, slot in zip(parts, kv_runs, slots):
        tokens = tokens_of(key)
        out.append(
            Derived(key, full, mamba, len(key), pack_tokens(tokens[:INLINE_TOKENS]), key_hash(tokens), runs, slot[0] if slot else -1)
        )
    return out


class DerivedMemo:
    """`derive_all` that reuses what a node's last read derived from the same objects."""

    def __init__(self, values: Values, tokens_of: Tokens) -> None:
        self._values, self._tokens_of = values, tokens_of
        self._memo: OrderedDict[int, Derived] = OrderedDict()
        """Node id -> what its last read derived, the oldest first."""

    def derive(self, nodes: Sequence[Any], *, whole_tree: bool = False, remember: bool = True) -> list[Derived]:
        """Reuses for a read of up to REUSE_NODES nodes, or REMEMBERED_NODES when the read is
        the `whole_tree` (a walked tree's, every capture). Not `remember`: nodes read once (a
        catch-up's), derived afresh and not remembered (they would push out the nodes steps
        read again and again, and the cyclic GC would carry each one into its oldest
        generation before it is dropped)."""
        if not remember or len(nodes) > (REMEMBERED_NODES if whole_tree else REUSE_NODES):
            return derive_all(nodes, self._values, self._tokens_of)
        memo, values = self._memo, self._values
        out: list[Derived | None] = []
        stale = []
        for node in nodes:
            known = memo.get(node.id)
            if known is not None:
                key, full, mamba = values(node)
                if known.key is not key or known.full is not full or known.mamba is not mamba:
                    known = None
            if known is None:
                stale.append(node)
            out.append(known)
        fresh = iter(derive_all(stale, values, self._tokens_of))
        result = []
        for node, known in zip(nodes, out):
            if known is None:
                known = memo[node.id] = next(fresh)
                memo.move_to_end(node.id)
            result.append(known)
        for _ in range(len(memo) - REMEMBERED_NODES):  # never this read's: it adds at most as many
            memo.popitem(last=False)
        return result
