"""sglang 0.5.23 scheduler state -> schema records: requests, mamba slot claims, KV allocator.

Where each piece lives (checked against the 0.5.23 source):

- requests the scheduler holds: `scheduler.chunked_req`; `running_batch.reqs`; `last_batch`,
  `cur_batch_for_debug` and the batches in `result_queue` (under overlap scheduling a new
  prefill batch is merged into `running_batch` only on the next iteration, and the batch whose
  forward is in flight sits in `result_queue`); `waiting_queue`;
- a request's mamba fields: `req.kv` (`ReqKvInfo`): `mamba_pool_idx` (working slot),
  `mamba_ping_pong_track_buffer` (1 or 2 slot ids, -1 empty), `mamba_ping_pong_empty` (0.5.23),
  `mamba_next_track_idx`, `mamba_last_track_idx`, `mamba_last_track_seqlen`,
  `mamba_prev_track_seqlen` (0.5.22 on), `mamba_cow_src_index`, `mamba_needs_clear`; its KV row
  `req_to_token_pool.req_to_token[req.kv.req_pool_idx]`;
- streaming sessions keep slots between turns: `tree_cache.session_records()` (sid -> ReqKvInfo);
- the mamba free list: `req_to_token_pool.mamba_allocator.free_slots` (slots 1..size, 0 is a
  dummy); the KV free list: `token_to_kv_pool_allocator.get_all_free_pages()` (page ids, token
  ids when page_size is 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mcinspect.run_edits import edit_runs
from mcinspect.schema import KvEdit, KvState, NodeId, RequestState, Rid, SlotClaim, SlotId

from .kv_free_edits import list_change, segments
from .req_kv import kv_of
from .request_reader import RequestReader  # noqa: F401  (a Generation's `pools.RequestReader`)
from .tensor_runs import free_run_arrays, free_token_runs, page_token_runs

TreeSlots = dict[SlotId, dict[NodeId, int]]
"""Tree-owned slot -> {node id: node end depth}; more than one node is a bug to show."""


class HeldRequest:
    """A request the scheduler holds, and its state. (Built for every held request at every
    captured step: a slotted class is built in a third of a frozen dataclass's time.)"""

    __slots__ = ("req", "state")

    def __init__(self, req: Any, state: RequestState) -> None:
        self.req, self.state = req, state


def held_requests(scheduler: Any, batch: Any = None) -> dict[Rid, HeldRequest]:
    """Every request the scheduler holds, with its state; `batch` is the one just processed.

    A finished request whose KV row went back is not held: it has nothing left, batches keep
    it only until the next one is built, and its `req.kv` can be stale (under no_buffer the
    tree takes its working slot and sglang leaves `mamba_pool_idx` set). Leaving it out also
    makes the result the same with or without `batch`, whose other requests the scheduler
    holds anyway (running_batch, chunked_req, waiting_queue).
    """
    batches = [batch, getattr(scheduler, "running_batch", None), getattr(scheduler, "last_batch", None)]
    batches.append(getattr(scheduler, "cur_batch_for_debug", None))
    batches.extend(queued for queued, _ in getattr(scheduler, "result_queue", ()))
    held: dict[Rid, HeldRequest] = {}
    chunked = getattr(scheduler, "chunked_req", None)
    if chunked is not None:
        held[chunked.rid] = HeldRequest(chunked, "chunked")
    listed: set[int] = set()  # ids of the lists read: in decode the batch just run, running_batch and last_batch share one
    for one in batches:
        reqs = getattr(one, "reqs", None)
        if not reqs or id(reqs) in listed:  # the batches hold their lists meanwhile: no id is reused
            continue
        listed.add(id(reqs))
        for req in reqs:
            if req.rid in held:
                continue
            finished = req.finished()
            if not (finished and not kv_of(req).holds_kv):
                held[req.rid] = HeldRequest(req, "finished" if finished else "running")
    for req in getattr(scheduler, "waiting_queue", ()):
        if req.rid not in held:
            held[req.rid] = HeldRequest(req, "waiting")
    return held


def session_kv(tree_cache: Any) -> dict[Rid, Any]:
    """Streaming sessions' kept ReqKvInfo, keyed by a pseudo request id `session:<sid>`."""
    records = getattr(tree_cache, "session_records", None)
    if records is None:
        return {}
    return {Rid(f"session:{sid}"): kv for sid, kv in records().items()}


def claims_for_slot(
    slot: int,
    free: bool,
    tree: Mapping[NodeId, int] | None,
    requests: Sequence[SlotClaim],
    admission: bool,
) -> tuple[SlotClaim, ...]:
    """All claims on one slot, in a fixed order; `unaccounted` when nothing holds it. A tuple:
    the capture keeps one per slot, and a list would stay tracked by the cyclic GC (see
    tensor_runs.runs_of_many).

    `admission`: the slot was pre-allocated by `alloc_group_begin` and the group is open; it
    counts as a claim only while no request holds the slot yet.
    """
    sid = SlotId(slot)
    claims = [SlotClaim(sid, "free")] if free else []
    for node, seqlen in sorted((tree or {}).items()):
        claims.append(SlotClaim(sid, "tree", node=node, seqlen=seqlen))
    claims.extend(requests)
    if admission and not free and not requests:
        claims.append(SlotClaim(sid, "admission"))
    return tuple(claims) or (SlotClaim(sid, "unaccounted"),)


def free_mamba_slots(req_to_token_pool: Any) -> torch.Tensor:
    """The mamba allocator's free list (int64 tensor of slot ids)."""
    return mamba_allocator(req_to_token_pool).free_slots


def mamba_pool_size(req_to_token_pool: Any) -> int:
    return int(mamba_allocator(req_to_token_pool).size)


def mamba_allocator(req_to_token_pool: Any) -> Any:
    """What hands out mamba slots (`alloc`, `free`, `free_slots`, `size`): the pool's
    MambaSlotAllocator, or on sglang 0.5.12 the MambaPool itself."""
    allocator = getattr(req_to_token_pool, "mamba_allocator", None)
    return allocator if allocator is not None else req_to_token_pool.mamba_pool


class KvReader:
    """The KV allocator's free list as runs, re-read only when the allocator changed it.

    sglang's allocators never edit `free_pages` in place: every alloc and free binds a new
    tensor (slice or cat). A decode step binds one even when it takes no page (`free_pages[0:]`,
    every step of a paged allocator): a view of the same memory, of the same length, holds the
    same pages. So the list is unchanged while its memory and length are those last read; the
    last one is held, so that memory cannot be another list's. When it changed, sglang's own
    token and paged allocators' runs are edited by what changed (kv_free_edits.py), not read
    whole: O(the change), where a whole read is O(the list's segments). A decode step's change
    is a page or two, so its fixed costs count: an alloc's slice of the held list is found by
    its address, not a compare, and a few pages' ranges in Python, not ~10 numpy calls (on the
    demo's 192-page pool the edits had cost 250 us a read in the engine, four times the whole
    read they replaced; now 57).
    """

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self._seen: tuple[Any, ...] | None = None
        self._held: tuple[Any, ...] = ()
        self._lists: tuple[torch.Tensor, ...] | None = None
        """The free lists last read, on the host (None: read them whole next); held, so no other
        tensor's memory lies in theirs (`_front_taken`)."""
        self._state: KvState | None = None
        self._edit: tuple[KvState | None, KvEdit] | None = None
        """The last read's change as an edit of the state it was made from (None: read whole)."""
        self._spread: _SpreadRead | None = None
        self._spread_done = False
        """The lists the edits begin from came from a read over steps, not from `read`."""
        self.whole_reads = 0
        """Reads of the whole free list (the first, and each one the edits could not follow),
        in one step or over steps (`read_over_steps`)."""

    def _fingerprint(self) -> tuple[Any, ...]:
        a = self.allocator
        free, released = getattr(a, "free_pages", None), getattr(a, "release_pages", None)
        return (*_where(free), *_where(released), getattr(a, "num_staged_pages", None))

    def changed(self) -> bool:
        """False only when the free list is provably the one last read."""
        seen = self._seen
        return seen is None or seen[0] is None or seen != self._fingerprint()

    def read(self) -> KvState:
        """The allocator now (keeps a reference to its free lists for `changed`)."""
        self._spread, self._spread_done = None, False  # read now: what a read over steps would have begun from is past
        a = self.allocator
        self._seen = self._fingerprint()
        self._held = (getattr(a, "free_pages", None), getattr(a, "release_pages", None))
        lists = _free_lists(a)
        base = self._state
        edited = self._edited(lists) if lists is not None and self._lists is not None else None
        self._edit = None
        if edited is not None:
            state, edit = edited
            self._edit = (base, edit)
        else:
            self.whole_reads += 1
            free = a.get_all_free_pages() if hasattr(a, "get_all_free_pages") else _free_and_released(a)
            state = KvState(page_size=int(a.page_size), size=int(a.size), free_runs=free_token_runs(free, int(a.page_size)))
            if lists is not None and sum(len(part) for part in lists) != len(free):
                lists = None  # the allocator's free set is not these lists: always read whole
        self._lists, self._state = lists, state
        return state

    def edit_since(self, base: KvState | None) -> KvEdit | None:
        """The last read's change as an edit of `base` (what a client holds): None when that read
        was whole, or edited another state (the end of a read over steps)."""
        edit = self._edit
        return edit[1] if edit is not None and edit[0] is base else None

    def read_over_steps(self) -> None:
        """A part of a whole read, in a step that publishes nothing (a catch-up's): of the free
        lists as they were at its first part (sglang never writes them in place: holding them
        keeps them as they were), so that the step that publishes edits from there, a short
        change, where after the many steps of a catch-up it would read a long list whole in
        that one step (25 ms at 100k runs). First part: the lists' runs as arrays; then
        `SPREAD_RUNS` runs a step become tuples; the last one takes them as the last read."""
        job = self._spread
        if job is None:
            if self._lists is None or self._spread_done or not self.changed():
                return  # no edits to begin from after, read over steps already, or nothing to read
            a = self.allocator
            lists = _free_lists(a)
            if lists is None:
                return
            starts, lengths = free_run_arrays(np.concatenate([part.numpy() for part in lists]), int(a.page_size))
            self._spread = _SpreadRead(lists, starts, lengths)
            return
        at = len(job.runs)
        job.runs += zip(job.starts[at : at + SPREAD_RUNS].tolist(), job.lengths[at : at + SPREAD_RUNS].tolist())
        if len(job.runs) < len(job.starts):
            return
        a = self.allocator
        # `_seen` and `_held` stay the last read's: `changed()` holds (its memory still held), and
        # the next capture reads (edits from these lists).
        self._lists = job.lists
        self._state = KvState(page_size=int(a.page_size), size=int(a.size), free_runs=job.runs)
        self._spread, self._spread_done = None, True
        self._edit = None
        self.whole_reads += 1

    def _edited(self, lists: tuple[torch.Tensor, ...]) -> tuple[KvState, KvEdit] | None:
        """The last state edited by what changed in each list, and that change; None when a
        change is not one sglang's allocators make (kv_free_edits.list_change)."""
        assert self._lists is not None and self._state is not None
        if len(lists) != len(self._lists):
            return None
        removed: list[np.ndarray] = []
        added: list[np.ndarray] = []
        for old, new in zip(self._lists, lists):
            change = _front_taken(old, new) or list_change(old.numpy(), new.numpy())
            if change is None:
                return None
            gone, come = change
            if len(gone):
                removed.append(gone)
            if len(come):
                added.append(come)
        page_size, runs = self._state.page_size, self._state.free_runs
        taken, given = _joined(removed), _joined(added)
        if len(taken) + len(given) > WHOLE_READ_EDITS:  # more pages than ranges: count the ranges
            ranges = segments(taken) + segments(given)
            if ranges > WHOLE_READ_EDITS and ranges * 20 > len(runs):
                return None  # an edit is a few us a range, a whole read a fraction of a us a run
        edit = KvEdit(page_token_runs(taken, page_size), page_token_runs(given, page_size))
        edited = edit_runs(runs, edit.removed, edit.added)
        return None if edited is None else (KvState(page_size=page_size, size=self._state.size, free_runs=edited), edit)


SPREAD_RUNS = 25_000
"""Runs made tuples in a step of `read_over_steps` (a few ms)."""


@dataclass
class _SpreadRead:
    """A whole read over steps: the lists as they were at its first part, their runs."""

    lists: tuple[torch.Tensor, ...]
    starts: np.ndarray
    lengths: np.ndarray
    runs: list[tuple[int, int]] = field(default_factory=list)


WHOLE_READ_EDITS = 256
"""Past this many changed ranges (runs of consecutive pages as the lists hold them), and a
twentieth of the runs, the list is read whole (after a stretch nobody watched, the edits of
100k ranges took 0.9 s; a whole read of 100k runs ~20 ms)."""

_EDITED_ALLOCATORS = ("TokenToKVPoolAllocator", "PagedTokenToKVPoolAllocator")
"""sglang's allocators whose free set is their free lists (`_free_lists`), each changed only by
a slice of its front and pages put before or after it."""


_NO_PAGES = torch.zeros(0, dtype=torch.int64)
_NO_PAGES_ARRAY = _NO_PAGES.numpy()


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """`parts` as one array (a step's change is mostly in one list: that one itself)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else _NO_PAGES_ARRAY


def _front_taken(old: torch.Tensor, new: torch.Tensor) -> tuple[np.ndarray, np.ndarray] | None:
    """(removed, added) when `new` is `old`'s own memory less a front part (an alloc's slice, or
    the list unchanged), found by address: `old` is held, so memory ending where it ends is its
    own, never written in place. None otherwise (compare the lists)."""
    taken = old.numel() - new.numel()
    if taken < 0 or new.data_ptr() != old.data_ptr() + taken * old.element_size():
        return None
    return old.numpy()[:taken], _NO_PAGES_ARRAY


def _free_lists(allocator: Any) -> tuple[torch.Tensor, ...] | None:
    """The allocator's free lists on the host (free pages, released pages, staged pages: what it
    has), or None where the runs are read whole (another allocator, a list not a tensor)."""
    if type(allocator).__name__ not in _EDITED_ALLOCATORS:
        return None
    parts = [getattr(allocator, "free_pages", None), getattr(allocator, "release_pages", None)]
    staged = getattr(allocator, "staged_pages", None)
    if isinstance(staged, list):  # one list, empty or not, so that a step's lists pair with the last's
        parts.append(torch.cat(staged) if staged else _NO_PAGES)
    out = []
    for part in parts:
        if part is None:
            continue
        if not isinstance(part, torch.Tensor) or part.dim() != 1:
            return None
        out.append(part.to("cpu", torch.int64))  # sglang's own tensor when a CPU int64 one (a copy else)
    return tuple(out)


def _where(pages: Any) -> tuple[int | None, int]:
    """(address of the first entry, length) of a tensor of page ids; (None, 0) for anything else."""
    if not isinstance(pages, torch.Tensor):
        return None, 0
    return pages.data_ptr(), pages.numel()


def _free_and_released(allocator: Any) -> torch.Tensor:
    """What 0.5.23's `get_all_free_pages` returns, on releases without it (MambaRadixCache's)."""
    released = allocator.release_pages
    if released is None or len(released) == 0:
        return allocator.free_pages
    return torch.cat((allocator.free_pages, released))
