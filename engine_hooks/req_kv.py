"""A request's cache fields under the names sglang 0.5.23 gives them (`req.kv`, a ReqKvInfo),
on every generation: the MambaRadixCache releases (0.5.12-0.5.15) keep the same fields on the
`Req` itself, without the derived ones. Read-only: nothing here writes to sglang."""

from __future__ import annotations

from typing import Any


def kv_of(req: Any) -> Any:
    """`req.kv` where sglang has it, else a `FlatKv` view of the request's own fields."""
    kv = getattr(req, "kv", None)
    return kv if kv is not None else FlatKv(req)


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
    """ReqKvInfo's names over a MambaRadixCache-generation `Req`: the fields it has are read
    through; `holds_kv`, `holds_mamba` and `mamba_last_track_idx` are derived as 0.5.23
    derives them; `mamba_prev_track_seqlen` does not exist there (None)."""

    __slots__ = ("req",)

    mamba_prev_track_seqlen = None

    def __init__(self, req: Any) -> None:
        self.req = req

    def __getattr__(self, name: str) -> Any:
        if name in _ABSENT:  # 0.5.12 copies a hit's state at the match: no deferred copy fields
            return getattr(self.req, name, _ABSENT[name])
        return getattr(self.req, name)

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
        buffer, following = req.mamba_ping_pong_track_buffer, req.mamba_next_track_idx
        if buffer is None or following is None:
            return None
        if len(buffer) != 2 or _lazy():
            return int(following)
        return 1 - int(following)


_ABSENT = {"mamba_cow_src_index": None, "mamba_needs_clear": False}


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
