"""KV pages from token runs: painting runs into per-page flags, and the tree's pages kept from
frame to frame.

Painting every node's runs is the page map's O(nodes) cost (~40 ms at 100k nodes). Consecutive
frames share almost every NodeRecord (records are replaced when they change), so `TreePages`
of the next frame are the previous frame's with the changed nodes' runs taken out and put back.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..schema import NodeId, NodeRecord, Runs
from .source import NodeChanges
from .tree_index import node_changes

_FILL_LEN = 1 << 16
_FILLS: dict[int, memoryview] = {}
"""One prebuilt run of each flag value; slices of a memoryview copy nothing."""


def _fill(value: int) -> memoryview:
    fill = _FILLS.get(value)
    if fill is None:
        fill = _FILLS[value] = memoryview(bytes([value]) * _FILL_LEN)
    return fill


def page_span(start: int, length: int, page_size: int, pages: int) -> tuple[int, int]:
    """Pages [first, end) that a token run touches, clipped to the pool (a run outside it is a
    bug in the data: a slice past the end would grow the flags instead)."""
    if length <= 0:
        return 0, 0
    return max(0, start // page_size), min(pages, (start + length - 1) // page_size + 1)


def _set(flags: bytearray, first: int, end: int, fill: memoryview) -> None:
    """flags[first:end] = the fill's value (slice assignment: C speed, no loop per page)."""
    while end - first > _FILL_LEN:
        flags[first : first + _FILL_LEN] = fill
        first += _FILL_LEN
    if first < end:
        flags[first:end] = fill[: end - first]


def paint(flags: bytearray, runs: Iterable[tuple[int, int]], value: int, page_size: int) -> None:
    """Set the flags of every page the token runs touch to `value`."""
    fill, pages = _fill(value), len(flags)
    for start, length in runs:
        first, end = page_span(start, length, page_size, pages)
        _set(flags, first, end, fill)


class TreePages:
    """Per page, `value` if a tree node (with its KV not evicted) holds it, else 0.

    A page held by two nodes is a bug the map must show, and must not turn free when one of them
    lets go: such pages count their holders beyond the first in `extra`.
    """

    def __init__(self, page_count: int, page_size: int, value: int) -> None:
        self.page_size = page_size
        self.value = value
        self.flags = bytearray(page_count)
        self.extra: dict[int, int] = {}

    @classmethod
    def build(cls, nodes: dict[NodeId, NodeRecord], page_count: int, page_size: int, value: int) -> TreePages:
        pages = cls(page_count, page_size, value)
        pages._add([run for node in nodes.values() if not node.kv_evicted for run in node.kv_runs])
        return pages

    def patched(self, old: dict[NodeId, NodeRecord], new: dict[NodeId, NodeRecord], changes: NodeChanges | None) -> TreePages:
        """A copy moved from the nodes `old` (which this reflects) to `new`; `changes`, when
        known, name the nodes that differ (else an identity scan finds them)."""
        pages = TreePages(0, self.page_size, self.value)
        pages.flags, pages.extra = bytearray(self.flags), dict(self.extra)
        changed, removed = node_changes(old, new, changes)
        for node_id in removed:
            pages._remove_node(old[node_id])
        for node in changed:
            before = old.get(node.id)
            if before is node:
                continue
            if before is not None:
                pages._remove_node(before)
            if not node.kv_evicted:
                pages._add(node.kv_runs)
        return pages

    def _remove_node(self, node: NodeRecord) -> None:
        if not node.kv_evicted:
            self._remove(node.kv_runs)

    def _add(self, runs: Runs) -> None:
        # The hot loop of a build (once per run of 100k nodes): inlined, no calls but C ones.
        flags, fill, page_size, pages = self.flags, _fill(self.value), self.page_size, len(self.flags)
        for start, length in runs:
            if length <= 0:
                continue
            first, end = start // page_size, (start + length - 1) // page_size + 1
            if first < 0 or end > pages or end - first > _FILL_LEN:  # outside the pool, or huge
                first, end = page_span(start, length, page_size, pages)
                self._mark_shared(first, end)
                _set(flags, first, end, fill)
                continue
            if flags.count(0, first, end) != end - first:
                self._mark_shared(first, end)
            flags[first:end] = fill[: end - first]

    def _mark_shared(self, first: int, end: int) -> None:
        """Count the pages in [first, end) that are held already (rare: a bug in the cache)."""
        flags, extra = self.flags, self.extra
        for page in range(first, end):
            if flags[page]:
                extra[page] = extra.get(page, 0) + 1

    def _remove(self, runs: Runs) -> None:
        flags, extra, zeros = self.flags, self.extra, _fill(0)
        for start, length in runs:
            first, end = page_span(start, length, self.page_size, len(flags))
            if first >= end:
                continue
            if not extra:
                _set(flags, first, end, zeros)
                continue
            for page in range(first, end):
                held = extra.get(page, 0)
                if held > 1:
                    extra[page] = held - 1
                elif held:
                    del extra[page]
                else:
                    flags[page] = 0
