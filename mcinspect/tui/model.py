"""What the panels derive from one CacheState: tree index, slot owners, page owners.

A `FrameView` wraps the state at the selected frame and computes each index the first time a
panel asks for it (a hidden panel costs nothing). All of it is read-only and rebuilt per frame;
nothing here touches Textual.
"""

from __future__ import annotations

import enum
from functools import cached_property
from typing import NewType

from ..schema import CacheState, NodeId, NodeRecord, Rid, Runs, SlotClaim, SlotId, pack_tokens
from .page_index import TreePages, paint
from .source import NodeChanges
from .tree_index import ChildIndex, build_children, patch_children
from .violations import ViolationRow

PageId = NewType("PageId", int)
"""KV page number: token index // page size."""


class SlotOwner(enum.IntEnum):
    """Colour class of one mamba slot in the slot map."""

    FREE = 0
    TREE = 1
    WORKING = 2
    PING_PONG_0 = 3
    PING_PONG_1 = 4
    COW_SOURCE = 5
    ADMISSION = 6
    UNACCOUNTED = 7
    MULTIPLE = 8
    """More than one owner claims the slot: always a bug."""


class PageOwner(enum.IntFlag):
    """Who holds a KV page; combinations other than one flag are conflicts."""

    NONE = 0
    FREE = 1
    TREE = 2
    REQUEST = 4


_KIND_OWNER = {
    "free": SlotOwner.FREE,
    "tree": SlotOwner.TREE,
    "working": SlotOwner.WORKING,
    "cow_source": SlotOwner.COW_SOURCE,
    "admission": SlotOwner.ADMISSION,
    "unaccounted": SlotOwner.UNACCOUNTED,
}


def slot_owner(claims: list[SlotClaim]) -> SlotOwner:
    """Classify a slot by its claims.

    A COW source is a tree-owned slot that a request will copy from, so a `cow_source` claim
    next to a `tree` claim is healthy and shows as COW source, not as a double claim.
    """
    owners = [claim for claim in claims if claim.kind != "cow_source"]
    if len(owners) > 1:
        return SlotOwner.MULTIPLE
    if len(owners) < len(claims):
        return SlotOwner.COW_SOURCE
    if not owners:
        return SlotOwner.UNACCOUNTED
    claim = owners[0]
    if claim.kind == "ping_pong":
        return SlotOwner.PING_PONG_1 if claim.ping_pong_index == 1 else SlotOwner.PING_PONG_0
    return _KIND_OWNER[claim.kind]


def runs_after(runs: Runs, offset: int) -> Runs:
    """The runs with their first `offset` tokens dropped (a request's part beyond the tree's)."""
    kept: Runs = []
    for start, length in runs:
        if offset >= length:
            offset -= length
            continue
        kept.append((start + offset, length - offset))
        offset = 0
    return kept


def _or_bytes(*layers: bytearray) -> bytes:
    """Bytewise OR of equal-length layers whose values use disjoint bits (C speed via int)."""
    total = 0
    for layer in layers:
        total |= int.from_bytes(layer, "little")
    return total.to_bytes(len(layers[0]), "little")


class FrameView:
    """The state at one frame plus lazily built indices for the panels."""

    def __init__(
        self,
        frame: int,
        state: CacheState,
        violations: list[ViolationRow],
        previous: FrameView | None = None,
        changes: NodeChanges | None = None,
    ) -> None:
        """`previous`: the view shown before, whose indices this one may patch instead of
        rebuilding them; `changes`: the tree changes from `previous` to this frame, if known."""
        self.frame = frame
        self.state = state
        self.violations = violations
        """Violations found at this frame."""
        # What this view may patch instead of rebuilding: the previous view's indices, if it
        # built them (never the view itself, so views do not chain back through history).
        built = previous.__dict__ if previous is not None else {}
        self._children_from = (previous.state.nodes, built["children"], changes) if "children" in built else None
        # Tree pages are patched from the last view that built them, however far back (the
        # page map is often hidden for many frames); `changes` only hold for the view before.
        self._pages_from: tuple[dict[NodeId, NodeRecord], TreePages, NodeChanges | None] | None = None
        if "tree_pages" in built:
            self._pages_from = (previous.state.nodes, built["tree_pages"], changes)
        elif previous is not None and previous._pages_from is not None:
            self._pages_from = (*previous._pages_from[:2], None)

    # --- tree -------------------------------------------------------------------------

    @cached_property
    def children(self) -> ChildIndex:
        """Children per node id, by id (creation order); top-level nodes under ROOT_PARENT."""
        base, self._children_from = self._children_from, None
        if base is not None and (patched := patch_children(base[0], base[1], self.state.nodes, base[2])) is not None:
            return patched
        return build_children(self.state.nodes)

    def path_to(self, node_id: NodeId) -> list[NodeId]:
        """Ids from the top-level ancestor down to `node_id` (empty if unknown)."""
        nodes = self.state.nodes
        path: list[NodeId] = []
        seen: set[NodeId] = set()
        current = node_id
        while current in nodes and current not in seen:  # `seen`: a corrupt parent loop must not hang the UI
            seen.add(current)
            path.append(current)
            current = nodes[current].parent
        path.reverse()
        return path

    def search_tokens(self, token_ids: list[int]) -> list[NodeId]:
        """Nodes whose key (as far as it is carried inline) contains `token_ids` in order."""
        needle = pack_tokens(token_ids)
        if not needle:
            return []
        found = []
        for node in self.state.nodes.values():
            position = node.tokens.find(needle)
            while position >= 0 and position % 4:  # a match must start on a token boundary
                position = node.tokens.find(needle, position + 1)
            if position >= 0:
                found.append(node.id)
        found.sort()
        return found

    @cached_property
    def violating_nodes(self) -> set[NodeId]:
        return {node for v in self.violations for node in v.violation.nodes}

    # --- slots ------------------------------------------------------------------------

    @cached_property
    def slot_ids(self) -> list[SlotId]:
        return sorted(self.state.slots)

    def owner_of(self, slot: SlotId) -> SlotOwner:
        """Colour class of a slot of this step (asked per cell drawn, not for all 10k slots per
        frame: a new frame redraws the few cells that changed)."""
        return slot_owner(self.state.slots[slot])

    def is_last_tracked(self, slot: SlotId) -> bool:
        """A ping-pong slot that `mamba_last_track_idx` points at."""
        claims = self.state.slots.get(slot, [])
        if slot_owner(claims) not in (SlotOwner.PING_PONG_0, SlotOwner.PING_PONG_1, SlotOwner.MULTIPLE):
            return False
        return any(claim.last_tracked for claim in claims)

    @cached_property
    def violating_slots(self) -> set[SlotId]:
        return {slot for v in self.violations for slot in v.violation.slots}

    def slots_changed_since(self, other: FrameView) -> set[SlotId]:
        """Slots that may look different in the slot map than at `other`'s step: their claims
        differ, or a violation names them at one step only. Claim lists are replaced, never
        edited, when a slot changes, so identity settles most slots without comparing them."""
        old = other.state.slots
        changed = {slot for slot, claims in self.state.slots.items() if (was := old.get(slot)) is not claims and was != claims}
        return changed | (self.violating_slots ^ other.violating_slots)

    # --- pages ------------------------------------------------------------------------

    @property
    def page_size(self) -> int:
        return max(1, self.state.kv.page_size)

    @cached_property
    def page_count(self) -> int:
        return -(-self.state.kv.size // self.page_size)

    @cached_property
    def tree_pages(self) -> TreePages:
        """The pages tree nodes hold (PageOwner.TREE flags)."""
        base, self._pages_from = self._pages_from, None
        pages, page_size = self.page_count, self.page_size
        if base is not None and len(base[1].flags) == pages and base[1].page_size == page_size:
            return base[1].patched(base[0], self.state.nodes, base[2])
        return TreePages.build(self.state.nodes, pages, page_size, PageOwner.TREE)

    @cached_property
    def page_owners(self) -> bytes:
        """PageOwner flags per page. A request's pages are those past its cache-protected
        prefix: the prefix belongs to the tree."""
        size, page_size = self.page_count, self.page_size
        free, request = bytearray(size), bytearray(size)
        paint(free, self.state.kv.free_runs, PageOwner.FREE, page_size)
        request_runs = (run for req in self.state.requests.values() for run in runs_after(req.kv_runs, req.cache_protected_len))
        paint(request, request_runs, PageOwner.REQUEST, page_size)
        return _or_bytes(free, self.tree_pages.flags, request)

    def pages_of(self, *, node: NodeId | None = None, rid: Rid | None = None) -> bytearray:
        """1 per page held by the node or the request (all of its row), else 0."""
        marks = bytearray(self.page_count)
        runs: Runs = []
        if node is not None and (record := self.state.nodes.get(node)) is not None:
            runs = record.kv_runs
        elif rid is not None and (req := self.state.requests.get(rid)) is not None:
            runs = req.kv_runs
        paint(marks, runs, 1, self.page_size)
        return marks

    def page_holders(self, page: PageId) -> tuple[list[NodeRecord], list[Rid]]:
        """Nodes and requests holding tokens in `page` (a scan: for one selected page)."""
        page_size = self.page_size
        lo, hi = page * page_size, (page + 1) * page_size

        def touches(runs: Runs) -> bool:
            return any(start < hi and start + length > lo for start, length in runs)

        nodes = [n for n in self.state.nodes.values() if not n.kv_evicted and touches(n.kv_runs)]
        rids = [r.rid for r in self.state.requests.values() if touches(r.kv_runs)]
        return nodes, rids
