"""A request's cache fields under the names sglang 0.5.23 gives them (`req.kv`, a ReqKvInfo),
on every generation: the MambaRadixCache releases (0.5.11-0.5.15) keep the same fields on the
`Req` itself, without the derived ones; 0.5.17-0.5.18 keep them there too, their ReqKvInfo
holding only the KV lengths. Read-only: nothing here writes to sglang."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def kv_of(req: Any) -> Any:
    """`req.kv` where it holds the request's row (0.5.19 on), else a `FlatKv` view of the
    request's own fields."""
    fields = fields_of(req)
    return fields if fields is not req else FlatKv(req)


def fields_of(req: Any) -> Any:
    """The object that holds a request's cache fields: `req.kv` from 0.5.19, the `Req` itself
    before. `kv_of` reads through it; only the reference oracle (to its own request) and the
    embedded engine's faults write through it."""
    kv = getattr(req, "kv", None)
    return kv if kv is not None and hasattr(kv, "req_pool_idx") else req


def node_id_of(node: Any) -> int:
    """A request's `last_node` as an id: 0.5.23 keeps the id, MambaRadixCache the TreeNode."""
    if isinstance(node, int):
        return node
    return int(getattr(node, "id", -1)) if node is not None else -1


def prefix_len_of(req: Any) -> int:
    """Tokens the request took from the cache (0.5.23's `req.prefix_len`; 0.5.21 and the
    MambaRadixCache releases have only `prefix_indices`)."""
    if hasattr(req, "prefix_len"):
        return int(req.prefix_len)
    indices = getattr(req, "prefix_indices", None)
    return len(indices) if indices is not None else 0


def key_tokens(key: Any) -> Any:
    """A RadixKey's raw token ids (its `raw_token_ids()` from 0.5.14; 0.5.13's key keeps them
    uncapped in `token_ids`)."""
    raw = getattr(key, "raw_token_ids", None)
    return raw() if raw is not None else key.token_ids


class FlatKv:
    """ReqKvInfo's names over a `Req` that keeps them itself (0.5.12-0.5.18): the fields it has
    are read through, the KV lengths from 0.5.17-0.5.18's slim `req.kv` (None once released:
    0); `holds_kv`, `holds_mamba` and (where the Req has no field for it: before 0.5.18)
    `mamba_last_track_idx` are derived as 0.5.23 derives them; `mamba_prev_track_seqlen` does
    not exist there (None)."""

    __slots__ = ("req",)

    mamba_prev_track_seqlen = None

    def __init__(self, req: Any) -> None:
        self.req = req

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.req, name, _MISSING)
        if value is not _MISSING:
            return value
        if name in _ABSENT:  # 0.5.12 copies a hit's state at the match: no deferred copy fields
            return _ABSENT[name]
        if name in _SLIM_KV:  # 0.5.17-0.5.18: in req.kv, which release_kv_cache sets to None
            kv = getattr(self.req, "kv", None)
            return getattr(kv, name) if kv is not None else 0
        raise AttributeError(f"{type(self.req).__name__} has no {name}")

    @property
    def holds_kv(self) -> bool:
        return self.req.req_pool_idx is not None

    @property
    def holds_mamba(self) -> bool:
        return self.req.mamba_pool_idx is not None

    @property
    def mamba_last_track_idx(self) -> int | None:
        """The ping-pong entry holding the last tracked state (sglang's
        `get_mamba_ping_pong_keep_idx`): the other entry after the eager swap, the next one
        under extra_buffer_lazy (whose second entry stays -1 until a boundary)."""
        req = self.req
        if hasattr(req, "mamba_last_track_idx"):  # 0.5.18 keeps it (sglang sets it at each track)
            return req.mamba_last_track_idx
        buffer, following = req.mamba_ping_pong_track_buffer, req.mamba_next_track_idx
        if buffer is None or following is None:
            return None
        if len(buffer) != 2 or _lazy():
            return int(following)
        return 1 - int(following)


_MISSING = object()
_ABSENT = {"mamba_cow_src_index": None, "mamba_needs_clear": False}
_SLIM_KV = ("kv_allocated_len", "swa_evicted_seqlen")


def _lazy() -> bool:
    from sglang.srt.server_args import get_global_server_args

    # 0.5.12 has no lazy mode (no such setting): the eager swap
    lazy = getattr(get_global_server_args(), "enable_mamba_extra_buffer_lazy", False)
    return bool(lazy() if callable(lazy) else lazy)


def prefill_track_mask(batch: Any) -> list[bool] | None:
    """Which rows of an extend batch write a track slot: `mamba_prefill_track_mask_cpu` (0.5.21
    on); 0.5.20 keeps only the device tensor `mamba_track_mask` built from the same list, read
    here (one host copy per extend batch; free on the CPU engine)."""
    if hasattr(batch, "mamba_prefill_track_mask_cpu"):
        return batch.mamba_prefill_track_mask_cpu
    mask = getattr(batch, "mamba_track_mask", None)
    return None if mask is None else [bool(x) for x in mask.tolist()]


def decode_track_mask(batch: Any) -> list[bool] | None:
    """Which rows of a decode batch just prepared write a track slot: `mamba_track_mask_cpu`
    (0.5.18 on); 0.5.17 keeps only the device mask, built by the rule recomputed here
    (`seq_lens_cpu % mamba_track_interval == 0`). None: the batch tracks nothing."""
    if hasattr(batch, "mamba_track_mask_cpu"):
        return batch.mamba_track_mask_cpu
    if getattr(batch, "mamba_track_mask", None) is None:
        return None
    return _recomputed(batch).mask


def decode_track_entries(batch: Any) -> list[int]:
    """The ping-pong entry each row's decode track writes: `mamba_track_buffer_indices` (0.5.18
    on), else the one 0.5.17's `set_mamba_track_indices_from_reqs` gathers (`mamba_next_track_idx`,
    0 where unset; its lazy mode has moved it to the new slot by then)."""
    entries = getattr(batch, "mamba_track_buffer_indices", None)
    if entries is not None:
        return entries
    rows = _recomputed(batch)
    if rows.entries is None:  # only where a row is at a boundary: the readers ask then
        rows.entries = [index if (index := kv_of(req).mamba_next_track_idx) is not None else 0 for req in batch.reqs]
    return rows.entries


@dataclass
class _DecodeRows:
    """0.5.17's decode track rows as sglang's rule gives them, for one prepared batch."""

    lens: weakref.ref[torch.Tensor]
    version: int
    mask: list[bool]
    entries: list[int] | None = None


_last_decode: _DecodeRows | None = None


def _recomputed(batch: Any) -> _DecodeRows:
    """The rows of the batch `prepare_for_decode` just prepared, computed once: three hooks after
    it read them (the plan event, the state log, the write hooks). Each call of it gives the batch a
    new `seq_lens_cpu`, so that tensor (held weakly: a freed one never matches) and its version
    say whether these are still the rows of the batch at hand."""
    global _last_decode
    lens = batch.seq_lens_cpu
    memo = _last_decode
    if memo is not None and memo.lens() is lens and memo.version == lens._version:
        return memo
    from sglang.srt.server_args import get_global_server_args

    interval = get_global_server_args().mamba_track_interval
    _last_decode = _DecodeRows(weakref.ref(lens), lens._version, [seqlen % interval == 0 for seqlen in lens.tolist()])
    return _last_decode
