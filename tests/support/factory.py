"""Schema records for tests, with defaults for everything a test does not care about.

One place builds NodeRecord, SlotClaim, Snapshot, Delta and EngineInfo by hand, so a schema
change is one edit here (tests that need whole trees use record_states.make_state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    EngineInfo,
    Event,
    KvState,
    NodeId,
    NodeRecord,
    Seq,
    SlotClaim,
    SlotId,
    Snapshot,
    Step,
    pack_tokens,
)


def engine_info(
    port: int = 7777, *, pid: int = 1, tree_core: str = "UnifiedTreeCore", full_tree_detail: bool = True, mamba_pool_size: int = 8
) -> EngineInfo:
    """An EngineInfo of the embedded engine's shape answering on `port` (stream on port + 1)."""
    return EngineInfo(
        schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="tiny-qwen3-next", strategy="extra_buffer",
        page_size=16, overlap=True, tree_core=tree_core, full_tree_detail=full_tree_detail, mamba_pool_size=mamba_pool_size,
        kv_pool_tokens=4096, tp_rank=0, dp_rank=0, pid=pid, request_port=port, stream_port=port + 1,
    )  # fmt: skip


def node(
    node_id: int,
    parent: int = -1,
    depth: int = 0,
    key_len: int = 16,
    *,
    slot: int = -1,
    lock: int = 0,
    token_ids: Sequence[int] | None = None,
    **fields: Any,
) -> NodeRecord:
    """A tree node: token ids 0..key_len-1 unless given (the first 32 inlined), its KV the run at
    `depth`, in the LRU and evictable unless locked; `fields` set any other NodeRecord field."""
    token_ids = list(token_ids) if token_ids is not None else list(range(key_len))
    record = NodeRecord(
        id=NodeId(node_id), parent=NodeId(parent), depth=depth, key_len=key_len, tokens=pack_tokens(token_ids[:32]),
        key_hash=node_id, kv_runs=[(depth, key_len)], kv_evicted=False, mamba_slot=SlotId(slot), full_lock=lock,
        mamba_lock=lock, in_full_lru=True, in_mamba_lru=slot != -1, evictable=not lock, last_access=0.0, hit_count=0,
        tombstone=False,
    )  # fmt: skip
    return msgspec.structs.replace(record, **fields) if fields else record


def free_slots(*slots: int) -> dict[SlotId, list[SlotClaim]]:
    return {SlotId(s): [SlotClaim(slot=SlotId(s), kind="free")] for s in slots}


def state(
    step: int = 0, *, nodes: Sequence[NodeRecord] = (), slots: dict[SlotId, list[SlotClaim]] | None = None, kv_size: int = 4096
) -> CacheState:
    """A cache state holding `nodes` and `slots`, every KV token free."""
    return CacheState(
        step=Step(step), nodes={n.id: n for n in nodes}, slots=slots or {}, requests={},
        kv=KvState(page_size=16, size=kv_size, free_runs=[(0, kv_size)]),
    )  # fmt: skip


def snapshot(seq: int = 0, cache: CacheState | None = None, counters: Counters | None = None) -> Snapshot:
    cache = cache if cache is not None else state(seq)
    return Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(seq), state=cache, counters=counters or Counters(published=seq))


def delta(
    seq: int, step: int | None = None, *, nodes: Sequence[NodeRecord] = (), events: Sequence[Event] = (), counters: Counters | None = None
) -> Delta:
    """A delta that upserts `nodes` (nothing else changes)."""
    return Delta(
        schema_version=SCHEMA_VERSION, seq=Seq(seq), step=Step(seq if step is None else step), upsert_nodes=list(nodes),
        removed_nodes=[], slots={}, upsert_requests=[], removed_requests=[], kv=None, events=list(events),
        counters=counters or Counters(published=seq),
    )  # fmt: skip


def runs_of(tokens: set[int]) -> list[tuple[int, int]]:
    """Maximal sorted runs of a token set, built by a plain walk (not mcinspect's run code)."""
    runs: list[tuple[int, int]] = []
    for token in sorted(tokens):
        if runs and runs[-1][0] + runs[-1][1] == token:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((token, 1))
    return runs


def tokens_of(runs: list[tuple[int, int]]) -> set[int]:
    """The tokens of (start, length) runs: `runs_of` the other way round."""
    return {start + i for start, length in runs for i in range(length)}
