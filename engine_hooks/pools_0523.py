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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mcinspect.schema import KvState, NodeId, RequestRecord, RequestState, Rid, SlotClaim, SlotId

from .req_kv import kv_of, node_id_of, prefix_len_of
from .tensor_runs import FrozenRuns, HostViews, free_token_runs, ints_of_many, runs_of_ints

TreeSlots = dict[SlotId, dict[NodeId, int]]
"""Tree-owned slot -> {node id: node end depth}; more than one node is a bug to show."""


@dataclass(frozen=True)
class HeldRequest:
    req: Any
    state: RequestState


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
    for one in batches:
        for req in getattr(one, "reqs", None) or ():
            finished = req.finished()
            if req.rid not in held and not (finished and not kv_of(req).holds_kv):
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


def _opt(value: int | None) -> int:
    return -1 if value is None else int(value)


@dataclass
class _RowRuns:
    """A request's KV runs cached across steps: decode only appends to its row."""

    key: tuple[Any, ...]
    allocated_len: int
    runs: FrozenRuns


class RequestReader:
    """Builds RequestRecords and the request-side slot claims, one device copy per step."""

    def __init__(self, req_to_token_pool: Any) -> None:
        self.pool = req_to_token_pool
        self._rows: dict[Rid, _RowRuns] = {}
        self._host = HostViews()

    def read(
        self, held: Mapping[Rid, HeldRequest], sessions: Mapping[Rid, Any]
    ) -> tuple[dict[Rid, RequestRecord], dict[SlotId, list[SlotClaim]]]:
        """(records of `held`, request claims by slot incl. sessions')."""
        kvs = [(rid, kv_of(h.req)) for rid, h in held.items()] + list(sessions.items())
        tensors = []
        for _, kv in kvs:
            tensors += [kv.mamba_pool_idx, kv.mamba_ping_pong_track_buffer, kv.mamba_cow_src_index]
        rows = [kv.req_pool_idx for _, kv in kvs[: len(held)]]
        tensors += self._mirror_rows(rows)
        tails = self._kv_tails(held)
        tensors += [tail for *_, tail in tails]
        values = ints_of_many(tensors)  # slots, mirrors and KV tails: one device copy
        n = len(kvs)
        slots = {rid: values[3 * i : 3 * i + 3] for i, (rid, _) in enumerate(kvs)}
        mirrors = _split_rows(rows, values[3 * n], values[3 * n + 1])
        claims: dict[SlotId, list[SlotClaim]] = {}
        for rid, kv in kvs:
            for claim in _claims(rid, kv, *slots[rid]):
                claims.setdefault(claim.slot, []).append(claim)
        for listed in claims.values():
            listed.sort(key=_claim_order)
        kv_runs = self._kv_runs(held, tails, values[3 * n + 2 :])
        records = {rid: _record(rid, h, slots[rid] + mirror, kv_runs[rid]) for (rid, h), mirror in zip(held.items(), mirrors)}
        return records, claims

    def _mirror_rows(self, rows: list[int | None]) -> list[Any]:
        """The device mirrors' entries the forward reads for `rows` (working slot, ping-pong
        slots), gathered in one index op per mirror (None where a mirror is absent); a host
        mirror through its numpy view (a fraction of a torch index op and its index tensor)."""
        present = [row for row in rows if row is not None]
        out: list[Any] = []
        index = None  # one index tensor for both mirrors (they live on one device)
        for name in ("req_index_to_mamba_index_mapping", "req_index_to_mamba_ping_pong_track_buffer_mapping"):
            mirror = getattr(self.pool, name, None)
            if mirror is None or not present:
                out.append(None)
                continue
            host = self._host.of(mirror)
            if host is not None:
                out.append(host[present].reshape(-1).tolist())
                continue
            if index is None or index.device != mirror.device:
                index = torch.tensor(present, dtype=torch.int64, device=mirror.device)
            out.append(mirror[index])
        return out

    def _kv_tails(self, held: Mapping[Rid, HeldRequest]) -> list[tuple[Rid, _RowRuns, int, Any]]:
        """(request, its cached runs, allocated length, the part of its row not read yet) of
        each request with a row: only the new tail is read when a request's row, protected
        prefix and retraction count are unchanged (None: nothing new)."""
        pending = []
        for rid, h in held.items():
            kv = kv_of(h.req)
            if kv.req_pool_idx is None or kv.kv_allocated_len <= 0:
                continue
            key = (kv.req_pool_idx, kv.cache_protected_len, getattr(h.req, "retraction_count", 0), id(kv))
            cached = self._rows.get(rid)
            start = 0
            if cached is not None and cached.key == key and kv.kv_allocated_len >= cached.allocated_len:
                start = cached.allocated_len
            else:
                cached = _RowRuns(key, 0, ())
            tail = None
            if start < kv.kv_allocated_len:
                host = self._host.of(self.pool.req_to_token)
                table = host if host is not None else self.pool.req_to_token
                tail = table[kv.req_pool_idx, start : kv.kv_allocated_len]
                if host is not None:
                    tail = tail.tolist()
            pending.append((rid, cached, kv.kv_allocated_len, tail))
        return pending

    def _kv_runs(
        self, held: Mapping[Rid, HeldRequest], tails: list[tuple[Rid, _RowRuns, int, Any]], ints: list[list[int]]
    ) -> dict[Rid, FrozenRuns]:
        """`req_to_token[row, :allocated_len]` as runs, from the cached runs and the tails read."""
        out: dict[Rid, FrozenRuns] = {rid: () for rid in held}
        rows: dict[Rid, _RowRuns] = {}
        for (rid, cached, allocated, _), tail in zip(tails, ints):
            runs = _join(cached.runs, runs_of_ints(tail)) if tail else cached.runs
            rows[rid] = _RowRuns(cached.key, allocated, runs)
            out[rid] = runs
        self._rows = rows
        return out


def _split_rows(rows: list[int | None], working: list[int], ping_pong: list[int]) -> list[list[list[int]]]:
    """Per row of `rows`: [working mirror ints, ping-pong mirror ints] ([] where absent)."""
    present = sum(row is not None for row in rows)
    width_working = len(working) // present if present else 0
    width_ping_pong = len(ping_pong) // present if present else 0
    out = []
    index = 0
    for row in rows:
        if row is None:
            out.append([[], []])
            continue
        out.append(
            [
                working[index * width_working : (index + 1) * width_working],
                ping_pong[index * width_ping_pong : (index + 1) * width_ping_pong],
            ]
        )
        index += 1
    return out


def _join(head: FrozenRuns, tail: FrozenRuns) -> FrozenRuns:
    if head and tail and head[-1][0] + head[-1][1] == tail[0][0]:
        return (*head[:-1], (head[-1][0], head[-1][1] + tail[0][1]), *tail[1:])
    return head + tail


_KIND_ORDER = {"working": 0, "ping_pong": 1, "cow_source": 2}


def _claim_order(claim: SlotClaim) -> tuple[int, str, int]:
    return _KIND_ORDER[claim.kind], claim.rid, claim.ping_pong_index


def _claims(rid: Rid, kv: Any, working: list[int], ping_pong: list[int], cow: list[int]) -> Iterable[SlotClaim]:
    if working:
        yield SlotClaim(SlotId(working[0]), "working", rid=rid)
    empty = getattr(kv, "mamba_ping_pong_empty", None) or [slot < 0 for slot in ping_pong]
    last = kv.mamba_last_track_idx
    for index, slot in enumerate(ping_pong):
        if empty[index] or slot < 0:
            continue
        is_last = index == last
        seqlen = kv.mamba_last_track_seqlen if is_last else getattr(kv, "mamba_prev_track_seqlen", None)
        yield SlotClaim(SlotId(slot), "ping_pong", rid=rid, ping_pong_index=index, last_tracked=is_last, seqlen=_opt(seqlen))
    if cow:
        yield SlotClaim(SlotId(cow[0]), "cow_source", rid=rid)


def _record(rid: Rid, held: HeldRequest, slots: list[list[int]], kv_runs: FrozenRuns) -> RequestRecord:
    req, kv = held.req, kv_of(held.req)
    working, ping_pong, cow, working_mirror, ping_pong_mirror = slots
    return RequestRecord(
        rid=rid,
        state=held.state,
        row=_opt(kv.req_pool_idx),
        prompt_len=len(req.origin_input_ids),
        output_len=len(req.output_ids),
        prefix_len=prefix_len_of(req),
        cache_protected_len=kv.cache_protected_len,
        committed_len=kv.kv_committed_len,
        allocated_len=kv.kv_allocated_len,
        last_node=NodeId(node_id_of(req.last_node)),
        working_slot=SlotId(working[0] if working else -1),
        ping_pong=[SlotId(slot) for slot in ping_pong],
        ping_pong_empty=list(getattr(kv, "mamba_ping_pong_empty", None) or [slot < 0 for slot in ping_pong]),
        next_track_idx=_opt(kv.mamba_next_track_idx),
        last_track_idx=_opt(kv.mamba_last_track_idx),
        last_track_seqlen=_opt(kv.mamba_last_track_seqlen),
        prev_track_seqlen=_opt(getattr(kv, "mamba_prev_track_seqlen", None)),
        cow_source=SlotId(cow[0] if cow else -1),
        needs_clear=bool(kv.mamba_needs_clear),
        kv_runs=kv_runs,
        working_mirror=SlotId(working_mirror[0] if working_mirror else -1),
        ping_pong_mirror=[SlotId(slot) for slot in ping_pong_mirror],
    )


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
    last one is held, so that memory cannot be another list's.
    """

    def __init__(self, allocator: Any) -> None:
        self.allocator = allocator
        self._seen: tuple[Any, ...] | None = None
        self._held: tuple[Any, ...] = ()

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
        a = self.allocator
        self._seen = self._fingerprint()
        self._held = (getattr(a, "free_pages", None), getattr(a, "release_pages", None))
        free = a.get_all_free_pages() if hasattr(a, "get_all_free_pages") else _free_and_released(a)
        return KvState(page_size=int(a.page_size), size=int(a.size), free_runs=free_token_runs(free, int(a.page_size)))


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
