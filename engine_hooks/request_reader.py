"""The requests the scheduler holds -> RequestRecords and their mamba slot claims, read
incrementally from step to step.

A running request in a decode step changes a few Python ints (its output and KV lengths) and
the tail of its KV row; its slots, mirrors and track fields change only at alloc, track,
donate and free. So each request's values are read once a step and compared with the last
read: a record is reused when nothing moved, copied with the new lengths when only they moved
(`msgspec.structs.replace`), built afresh otherwise; claims are rebuilt only for a request
whose slot values moved, and only the slots they touch are re-sorted. A record that only
decoding moved goes out as a RequestGrowth (its lengths and the KV runs added), not whole: at
page size 1 its `kv_runs` hold a run per decoded token (kept as GrowingRuns: O(1) a step).

The slot tensors themselves are re-read every step: sglang writes the ping-pong buffer in place
and the scheduler's own tensors are inference tensors (no version counter). On the host they are
read through numpy views kept while the tensor is the same object (a fraction of `.tolist()`);
off the host all of a step's values go in one device copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import numpy as np
import torch

from mcinspect.schema import NodeId, RequestGrowth, RequestRecord, Rid, SlotClaim, SlotId

from .growing_runs import GrowingRuns
from .req_kv import FlatKv, fields_of, node_id_of, prefix_len_of
from .tensor_runs import FrozenRuns, HostViews, concat_on_host, host_view, runs_of_ints, version_of

if TYPE_CHECKING:
    from .pools_0523 import HeldRequest

MIRRORS = ("req_index_to_mamba_index_mapping", "req_index_to_mamba_ping_pong_track_buffer_mapping")
"""The device mirrors the forward reads a row's slots from (working, ping-pong)."""

Claims = dict[SlotId, list[SlotClaim]]
Slots = tuple[int, ...]
Ints = tuple[Slots, Slots, Slots, Slots, Slots, list[int] | None]
"""A request's values read from tensors: working, ping-pong and cow-source slots, working and
ping-pong mirror entries, the unread tail of its KV row (None: nothing new). Tuples: kept in
`_Seen.key` from step to step, tuples of ints leave the cyclic GC's lists at its first look,
where lists (a few a request a step) stayed in them, and, promoted, brought on collections of
the process's whole heap (330 ms each in bench_decode_deltas' process at 256 requests)."""

_NO_TENSORS: tuple[Any, Any, Any] = (None, None, None)
_NONE_VIEW = np.zeros(0, dtype=np.int64)
"""The view of an absent slot tensor: no ints."""
_NO_VIEWS = (_NONE_VIEW, _NONE_VIEW, _NONE_VIEW)
_NO_SLOTS: tuple[Slots, Slots, Slots] = ((), (), ())
_NO_MIRRORS: tuple[Slots, Slots] = ((), ())
_NO_INTS: Ints = ((), (), (), (), (), None)
"""The values of a request with no row and no slot tensor."""


class _Seen:
    """One request's (or streaming session's) values as last read, and what was built from them."""

    __slots__ = ("req", "fields", "tensors", "views", "device", "mirror_key", "mirrors", "key", "claims", "record", "lengths")
    __slots__ += ("row_key", "row_len", "runs")

    def __init__(self, req: Any, fields: Any, claims: tuple[SlotClaim, ...]) -> None:
        self.req, self.fields = req, fields
        self.tensors = _NO_TENSORS
        """Working, ping-pong and cow-source tensors as last seen (their views are kept while
        each is the same object)."""
        self.views = _NO_VIEWS
        self.device: tuple[tuple[Any, Any, Any], tuple[torch.Tensor, ...], tuple[int, int, int]] | None = None
        """Off the host: the tensors, their flat views and lengths (`_device_parts`)."""
        self.mirror_key: tuple[Any, ...] | None = None
        """(row, the host mirrors' versions) `mirrors` were read at: while the same, so are they."""
        self.mirrors: tuple[Slots, Slots] = ((), ())
        self.key: tuple[Any, ...] | None = None
        """What `claims` and `record` (bar its lengths) were built from."""
        self.claims = claims
        """Its claims in the reader's by-slot index (kept across a new _Seen for the same rid)."""
        self.record: RequestRecord | None = None
        self.lengths: tuple[int, int, int] | None = None
        self.row_key: tuple[Any, ...] | None = None
        """(row, protected prefix, retraction count): while the same, decode only appends to the row."""
        self.row_len = 0
        self.runs = GrowingRuns.empty()


_Plan = tuple[Rid, "HeldRequest | None", Any, _Seen, Any, int, int]
"""(rid, held request (None: a session), its fields (req_kv.kv_of), its _Seen, row, and the part
of the row not read yet: [start, end))."""


class Read(NamedTuple):
    """One read: the held requests' records, the claims, and what moved since the last read."""

    records: dict[Rid, RequestRecord]
    claims: Claims
    """Request claims by slot incl. sessions': the reader's own index, updated in place by the
    next read (the caller must not change it)."""
    moved: set[int]
    """Slots whose claims changed."""
    upserts: list[RequestRecord]
    """Records that differ from the last read's (in `records`' order), but those in `grown`."""
    grown: list[RequestGrowth]
    """Records that only decoding moved from the last read's, as that move."""


class RequestReader:
    """Builds RequestRecords and the request-side slot claims, at most one device copy a step."""

    def __init__(self, req_to_token_pool: Any) -> None:
        self.pool = req_to_token_pool
        self._seen: dict[Rid, _Seen] = {}
        self._claims: Claims = {}
        self._consistent = False
        """The last read ran to the end: `_seen` and `_claims` agree (a read that raised leaves
        them apart; the next read rebuilds everything)."""
        self._host = HostViews()
        self._records: dict[Rid, RequestRecord] = {}
        """The last read's records: what `Read.upserts` differ from."""

    def read(self, held: Mapping[Rid, HeldRequest], sessions: Mapping[Rid, Any]) -> Read:
        """The records of `held` and the claims now, and what moved since the last read."""
        fresh = not self._consistent
        self._consistent = False
        last = {} if fresh else self._seen
        plans: list[_Plan] = []
        for rid, h in held.items():
            req = h.req
            fields, seen = fields_of(req), last.get(rid)
            if seen is None or seen.req is not req or seen.fields is not fields:
                seen = _Seen(req, fields, seen.claims if seen is not None else ())
            plans.append(_plan(rid, h, fields if fields is not req else FlatKv(req), seen))
        for rid, kv in sessions.items():
            seen = last.get(rid)
            if seen is None or seen.fields is not kv:
                seen = _Seen(None, kv, seen.claims if seen is not None else ())
            plans.append((rid, None, kv, seen, None, 0, 0))
        ints = self._host_ints(plans)
        if ints is None:
            ints = self._device_ints(plans)
        records: dict[Rid, RequestRecord] = {}
        upserts: list[RequestRecord] = []
        grown: list[RequestGrowth] = []
        last_records = self._records
        seen_now: dict[Rid, _Seen] = {}
        changed: list[tuple[Rid, tuple[SlotClaim, ...], tuple[SlotClaim, ...]]] = []
        for (rid, h, kv, seen, row, _, end), values in zip(plans, ints):
            seen_now[rid] = seen
            before = seen.claims
            if h is None:
                _update_session(rid, kv, seen, values)
            else:
                kept = seen.record
                record, change = _update(rid, h, kv, seen, values, row, end)
                records[rid] = record
                if change:
                    # `_update` tells its record from the one it kept; from the last read's, when
                    # that is another (`seen` is new) or none, only a compare can.
                    last = last_records.get(rid)
                    if last is kept and change is not True:
                        grown.append(change)
                    elif last is kept or last is None or record != last:
                        upserts.append(record)
            if seen.claims is not before:
                changed.append((rid, before, seen.claims))
        changed += [(rid, gone.claims, ()) for rid, gone in self._seen.items() if rid not in seen_now and gone.claims]
        moved = self._rebuild_claims(seen_now.values()) if fresh else _move_claims(self._claims, changed)
        self._seen, self._records = seen_now, records
        self._consistent = True
        return Read(records, self._claims, moved, upserts, grown)

    def _host_ints(self, plans: list[_Plan]) -> list[Ints] | None:
        """Every request's values through numpy views; None when a tensor is off the host."""
        pool = self.pool
        table = self._host.of(pool.req_to_token)
        if table is None:
            return None
        mirrors: list[np.ndarray | None] = []
        versions: list[int | None] = []
        for name in MIRRORS:
            mirror = getattr(pool, name, None)
            view = self._host.of(mirror) if mirror is not None else None
            if mirror is not None and view is None:
                return None
            mirrors.append(view)
            versions.append(version_of(mirror) if mirror is not None else 0)
        working_mirror, ping_pong_mirror = mirrors
        out: list[Ints] = []
        for _, _, kv, seen, row, start, end in plans:
            tensors = (kv.mamba_pool_idx, kv.mamba_ping_pong_track_buffer, kv.mamba_cow_src_index)
            if row is None and tensors[0] is None and tensors[1] is None and tensors[2] is None:
                # A waiting request (hundreds of them under load): no row, no slot, no value to read.
                seen.tensors, seen.views, seen.mirror_key = _NO_TENSORS, _NO_VIEWS, None
                out.append(_NO_INTS)
                continue
            kept = seen.tensors
            if tensors[0] is not kept[0] or tensors[1] is not kept[1] or tensors[2] is not kept[2]:
                views = [_NONE_VIEW if t is None else _flat_view(t) for t in tensors]
                if any(view is None for view in views):
                    return None
                seen.tensors, seen.views = tensors, tuple(views)
            working, ping_pong, cow = seen.views
            # The mirrors are sglang's tables (not inference tensors): their version counts writes.
            mirror_key = (row, *versions)
            if mirror_key != seen.mirror_key or None in versions:
                seen.mirror_key, seen.mirrors = mirror_key, (_row_ints(working_mirror, row), _row_ints(ping_pong_mirror, row))
            tail = None
            if start < end:  # a decode step's one new token: item() is a fraction of a slice's tolist()
                tail = [table.item(row, start)] if end - start == 1 else table[row, start:end].tolist()
            out.append((tuple(working.tolist()), tuple(ping_pong.tolist()), tuple(cow.tolist()), *seen.mirrors, tail))
        return out

    def _device_ints(self, plans: list[_Plan]) -> list[Ints]:
        """Every request's values in one device copy: its slot tensors through flat views kept
        while each is the same object (`_device_parts`), the mirrors' rows in one gather, a
        decode step's one-token tails in one gather (a slice and a reshape a request a step were
        two thirds of this read at 256 requests: tests/bench/bench_decode_deltas.py)."""
        parts: list[torch.Tensor] = []
        widths: list[tuple[int, int, int]] = []
        for _, _, kv, seen, *_ in plans:
            flat, width = _device_parts(seen, kv)
            parts += flat
            widths.append(width)
        rows = [plan[4] for plan in plans]
        mirrors = self._mirror_rows([row for row in rows if row is not None])
        parts += [mirror.reshape(-1) for mirror in mirrors if mirror is not None]
        table = self.pool.req_to_token
        ones = [i for i, plan in enumerate(plans) if plan[6] - plan[5] == 1]
        longer = [i for i, plan in enumerate(plans) if plan[6] - plan[5] > 1]
        if ones:
            index = torch.tensor([[plans[i][4] for i in ones], [plans[i][5] for i in ones]], dtype=torch.int64, device=table.device)
            parts.append(table[index[0], index[1]])
        parts += [table[plans[i][4], plans[i][5] : plans[i][6]] for i in longer]
        values = concat_on_host(parts).tolist()
        slots: list[tuple[Slots, Slots, Slots]] = []
        at = 0
        for working_len, ping_pong_len, cow_len in widths:
            if not (working_len or ping_pong_len or cow_len):  # no slot tensor (a waiting request)
                slots.append(_NO_SLOTS)
                continue
            a, b, c = at + working_len, at + working_len + ping_pong_len, at + working_len + ping_pong_len + cow_len
            slots.append((tuple(values[at:a]), tuple(values[a:b]), tuple(values[b:c])))
            at = c
        lengths = [0 if mirror is None else mirror.numel() for mirror in mirrors]
        by_row = _split_rows(rows, tuple(values[at : at + lengths[0]]), tuple(values[at + lengths[0] : at + lengths[0] + lengths[1]]))
        at += lengths[0] + lengths[1]
        tails: dict[int, list[int]] = {}
        for i in (*ones, *longer):
            tails[i] = values[at : at + plans[i][6] - plans[i][5]]
            at += plans[i][6] - plans[i][5]
        return [(*slots[i], *by_row[i], tails.get(i)) for i in range(len(plans))]

    def _mirror_rows(self, present: list[int]) -> list[Any]:
        """The mirrors' entries for the rows `present`, gathered in one index op per mirror
        (None where a mirror is absent)."""
        out: list[Any] = []
        index = None  # one index tensor for both mirrors (they live on one device)
        for name in MIRRORS:
            mirror = getattr(self.pool, name, None)
            if mirror is None or not present:
                out.append(None)
                continue
            if index is None or index.device != mirror.device:
                index = torch.tensor(present, dtype=torch.int64, device=mirror.device)
            out.append(mirror[index])
        return out

    def _rebuild_claims(self, seen: Iterable[_Seen]) -> set[int]:
        """Index every claim afresh (the first read, or after one that raised); returns the
        slots whose claims differ from the last index."""
        claims: Claims = {}
        for one in seen:
            for claim in one.claims:
                claims.setdefault(claim.slot, []).append(claim)
        for listed in claims.values():
            listed.sort(key=_claim_order)
        old, self._claims = self._claims, claims
        return {slot for slot in claims.keys() | old.keys() if claims.get(slot) != old.get(slot)}


def _plan(rid: Rid, held: HeldRequest, kv: Any, seen: _Seen) -> _Plan:
    """The request's row and the part of it not read yet (decode appends a token or a few)."""
    row, allocated = kv.req_pool_idx, kv.kv_allocated_len
    if row is None or allocated <= 0:
        if seen.row_key is not None:  # it left its row; a request that had none keeps its empty runs
            seen.row_key, seen.row_len, seen.runs = None, 0, GrowingRuns.empty()
        return rid, held, kv, seen, row, 0, 0
    row_key = (row, kv.cache_protected_len, getattr(held.req, "retraction_count", 0))
    if row_key == seen.row_key and allocated >= seen.row_len:
        return rid, held, kv, seen, row, seen.row_len, allocated
    seen.row_key, seen.row_len, seen.runs = row_key, 0, GrowingRuns.empty()
    return rid, held, kv, seen, row, 0, allocated


def _update(
    rid: Rid, held: HeldRequest, kv: Any, seen: _Seen, values: Ints, row: Any, end: int
) -> tuple[RequestRecord, RequestGrowth | bool]:
    """Bring `seen` up to date with this step's values; returns the request's record, and how it
    differs from the one `seen` kept: not (False), by decoding alone (the RequestGrowth that
    makes the kept record this one), or otherwise (True; also when it kept none)."""
    working, ping_pong, cow, working_mirror, ping_pong_mirror, tail = values
    before = seen.runs
    added: FrozenRuns = ()
    if tail:
        added = runs_of_ints(tail)
        seen.runs = before.extended(added)
        seen.row_len = end
    req = held.req
    key = (
        *_claim_key(kv, working, ping_pong, cow), held.state, row, len(req.origin_input_ids), prefix_len_of(req),
        kv.cache_protected_len, node_id_of(req.last_node), kv.mamba_next_track_idx, kv.mamba_needs_clear, working_mirror,
        ping_pong_mirror,
    )  # fmt: skip
    lengths = (len(req.output_ids), kv.kv_committed_len, kv.kv_allocated_len)
    record = kept = seen.record
    change: RequestGrowth | bool
    if key != seen.key or record is None:
        if seen.key is None or key[:_CLAIM_FIELDS] != seen.key[:_CLAIM_FIELDS]:
            seen.claims = tuple(_claims(rid, *key[:_CLAIM_FIELDS]))
        record = _record(rid, held, kv, key, seen.runs, lengths)
        change = kept is None or record != kept  # a key field the record does not show may have moved
    elif lengths != seen.lengths or record.kv_runs is not seen.runs:
        output_len, committed, allocated = lengths
        record = msgspec.structs.replace(record, output_len=output_len, committed_len=committed, allocated_len=allocated, kv_runs=seen.runs)
        if kept.kv_runs is before:  # the kept runs and this step's: the growth says all
            change = RequestGrowth(rid, output_len, committed, allocated, added)  # type: ignore[arg-type]  # tuples encode as the schema's list
        else:  # the row was read afresh (moved, retracted)
            change = lengths != seen.lengths or record.kv_runs != kept.kv_runs
    else:
        # Nothing moved: the last key and lengths stay (new tuples kept at every step outlived
        # the GC's youngest generation and brought on collections of the older ones, with
        # hundreds of waiting requests: tests/bench/bench_waiting_requests.py).
        return record, False
    seen.key, seen.lengths, seen.record = key, lengths, record
    return record, change


def _claim_key(kv: Any, working: Slots, ping_pong: Slots, cow: Slots) -> tuple[Any, ...]:
    """What a request's claims are built from (`_claims`' arguments after the rid): its slot
    values, which ping-pong entries are empty, and its track fields."""
    empty = getattr(kv, "mamba_ping_pong_empty", None)
    return (
        working,
        ping_pong,
        cow,
        tuple(empty) if empty else tuple(slot < 0 for slot in ping_pong),
        kv.mamba_last_track_idx,
        kv.mamba_last_track_seqlen,
        getattr(kv, "mamba_prev_track_seqlen", None),
    )


_CLAIM_FIELDS = 7
"""The first fields of `_update`'s key: `_claim_key`'s."""


def _update_session(rid: Rid, kv: Any, seen: _Seen, values: Ints) -> None:
    """A streaming session's claims, rebuilt when its slot values moved."""
    key = _claim_key(kv, *values[:3])
    if key != seen.key:
        seen.key, seen.claims = key, tuple(_claims(rid, *key))


def _move_claims(claims: Claims, changed: list[tuple[Rid, tuple[SlotClaim, ...], tuple[SlotClaim, ...]]]) -> set[int]:
    """Replace the claims of the requests in `changed` ((rid, before, after)) in the by-slot
    index, in place; returns the slots whose claim lists changed."""
    moved: set[int] = set()
    if not changed:
        return moved
    rids = {rid for rid, _, _ in changed}
    added: dict[SlotId, list[SlotClaim]] = {}
    touched = set()
    for _, before, after in changed:
        touched.update(claim.slot for claim in before)
        for claim in after:
            added.setdefault(claim.slot, []).append(claim)
    for slot in touched | added.keys():
        old = claims.get(slot, [])
        new = [claim for claim in old if claim.rid not in rids] + added.get(slot, [])
        new.sort(key=_claim_order)
        if new == old:
            continue
        moved.add(slot)
        if new:
            claims[slot] = new
        else:
            del claims[slot]
    return moved


def _device_parts(seen: _Seen, kv: Any) -> tuple[tuple[torch.Tensor, ...], tuple[int, int, int]]:
    """A request's working, ping-pong and cow-source tensors as flat views (its absent ones
    left out), and each one's length (0: absent); kept in `seen` while each is the same object
    and at most 1-d (a view of one shares its memory: every write shows through)."""
    tensors = (kv.mamba_pool_idx, kv.mamba_ping_pong_track_buffer, kv.mamba_cow_src_index)
    kept = seen.device
    if kept is not None and kept[0][0] is tensors[0] and kept[0][1] is tensors[1] and kept[0][2] is tensors[2]:
        return kept[1], kept[2]
    flat = tuple(tensor.reshape(-1) for tensor in tensors if tensor is not None)
    width = (_numel(tensors[0]), _numel(tensors[1]), _numel(tensors[2]))
    if all(tensor is None or tensor.dim() <= 1 for tensor in tensors):
        seen.device = (tensors, flat, width)
    return flat, width


def _numel(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else tensor.numel()


def _flat_view(tensor: torch.Tensor) -> np.ndarray | None:
    """A slot tensor's (0-d or 1-d) numpy view as 1-d; None off the host or not viewable."""
    if tensor.dim() > 1:
        return None
    view = host_view(tensor)
    return view.reshape(-1) if view is not None else None  # a 0-d or 1-d view reshapes to a view


def _row_ints(mirror: np.ndarray | None, row: int | None) -> Slots:
    if mirror is None or row is None:
        return ()
    return (mirror.item(row),) if mirror.ndim == 1 else tuple(mirror[row].tolist())


def _split_rows(rows: list[int | None], working: Slots, ping_pong: Slots) -> list[tuple[Slots, Slots]]:
    """Per row of `rows`: (working mirror ints, ping-pong mirror ints) (() where absent)."""
    present = sum(row is not None for row in rows)
    width_working = len(working) // present if present else 0
    width_ping_pong = len(ping_pong) // present if present else 0
    out = []
    index = 0
    for row in rows:
        if row is None:
            out.append(_NO_MIRRORS)
            continue
        out.append(
            (
                working[index * width_working : (index + 1) * width_working],
                ping_pong[index * width_ping_pong : (index + 1) * width_ping_pong],
            )
        )
        index += 1
    return out


_KIND_ORDER = {"working": 0, "ping_pong": 1, "cow_source": 2}


def _claim_order(claim: SlotClaim) -> tuple[int, str, int]:
    return _KIND_ORDER[claim.kind], claim.rid, claim.ping_pong_index


def _opt(value: int | None) -> int:
    return -1 if value is None else int(value)


def _claims(
    rid: Rid,
    working: Slots,
    ping_pong: Slots,
    cow: Slots,
    empty: tuple[bool, ...],
    last: int | None,
    last_seqlen: int | None,
    prev_seqlen: int | None,
) -> Iterable[SlotClaim]:
    if working:
        yield SlotClaim(SlotId(working[0]), "working", rid=rid)
    for index, slot in enumerate(ping_pong):
        if empty[index] or slot < 0:
            continue
        is_last = index == last
        seqlen = last_seqlen if is_last else prev_seqlen
        yield SlotClaim(SlotId(slot), "ping_pong", rid=rid, ping_pong_index=index, last_tracked=is_last, seqlen=_opt(seqlen))
    if cow:
        yield SlotClaim(SlotId(cow[0]), "cow_source", rid=rid)


def _record(
    rid: Rid, held: HeldRequest, kv: Any, key: tuple[Any, ...], kv_runs: GrowingRuns, lengths: tuple[int, int, int]
) -> RequestRecord:
    """The record from `_update`'s key and lengths (its fields in the key's order)."""
    working, ping_pong, cow, empty, last_idx, last_seqlen, prev_seqlen, state, row, prompt_len, prefix_len = key[:11]
    protected, last_node, next_idx, needs_clear, working_mirror, ping_pong_mirror = key[11:]
    output_len, committed, allocated = lengths
    return RequestRecord(
        rid=rid,
        state=state,
        row=_opt(row),
        prompt_len=prompt_len,
        output_len=output_len,
        prefix_len=prefix_len,
        cache_protected_len=protected,
        committed_len=committed,
        allocated_len=allocated,
        last_node=NodeId(last_node),
        working_slot=SlotId(working[0] if working else -1),
        ping_pong=[SlotId(slot) for slot in ping_pong],
        ping_pong_empty=list(empty),
        next_track_idx=_opt(next_idx),
        last_track_idx=_opt(last_idx),
        last_track_seqlen=_opt(last_seqlen),
        prev_track_seqlen=_opt(prev_seqlen),
        cow_source=SlotId(cow[0] if cow else -1),
        needs_clear=bool(needs_clear),
        kv_runs=kv_runs,  # type: ignore[arg-type]  # encoded as the schema's list (growing_runs.encoder)
        working_mirror=SlotId(working_mirror[0] if working_mirror else -1),
        ping_pong_mirror=[SlotId(slot) for slot in ping_pong_mirror],
    )
