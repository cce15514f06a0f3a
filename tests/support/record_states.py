"""Cache states built from schema records (no engine, no sglang): trees of any shape, with
mamba slots, locks, tombstones and requests holding working and ping-pong slots."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from mcinspect.schema import (
    CacheState,
    KvState,
    NodeId,
    NodeRecord,
    RequestRecord,
    Rid,
    SlotClaim,
    SlotContent,
    SlotId,
    Step,
    key_hash,
    pack_tokens,
)


def make_state(
    parents: dict[int, int],
    *,
    key_len: int = 16,
    slots: dict[int, int] | None = None,
    locked: Collection[int] = (),
    evictable: Collection[int] = (),
    tombstones: Collection[int] = (),
    requests: Sequence[RequestRecord] = (),
    contents: dict[int, SlotContent] | None = None,
) -> CacheState:
    """A state whose tree has `parents` (node -> parent, -1 for the root); `slots` maps node ->
    mamba slot; slot claims follow from the nodes and the requests."""
    slots = slots or {}
    depth: dict[int, int] = {}
    for node in sorted(parents):  # parents have smaller ids in every test tree
        parent = parents[node]
        depth[node] = depth[parent] + key_len if parent in parents and parent in depth else 0
    nodes = {}
    for node, parent in parents.items():
        tokens = list(range(depth[node], depth[node] + key_len))
        lock = 1 if node in locked else 0
        nodes[NodeId(node)] = NodeRecord(
            id=NodeId(node),
            parent=NodeId(parent),
            depth=depth[node],
            key_len=key_len,
            tokens=pack_tokens(tokens[:32]),
            key_hash=key_hash(tokens),
            kv_runs=[(depth[node], key_len)],
            kv_evicted=False,
            mamba_slot=SlotId(slots.get(node, -1)),
            full_lock=lock,
            mamba_lock=lock,
            in_full_lru=not lock,
            in_mamba_lru=node in slots and not lock,
            evictable=node in evictable,
            last_access=1.0,
            hit_count=0,
            tombstone=node in tombstones,
        )
    claims: dict[SlotId, list[SlotClaim]] = {}
    for node, slot in slots.items():
        claims.setdefault(SlotId(slot), []).append(SlotClaim(slot=SlotId(slot), kind="tree", node=NodeId(node)))
    for request in requests:
        if request.working_slot != -1:
            claims.setdefault(request.working_slot, []).append(SlotClaim(slot=request.working_slot, kind="working", rid=request.rid))
        for index, slot in enumerate(request.ping_pong):
            claims.setdefault(slot, []).append(
                SlotClaim(
                    slot=slot,
                    kind="ping_pong",
                    rid=request.rid,
                    ping_pong_index=index,
                    last_tracked=index == request.last_track_idx,
                    seqlen=request.last_track_seqlen,
                )
            )
    return CacheState(
        step=Step(3),
        nodes=nodes,
        slots=claims,
        requests={r.rid: r for r in requests},
        kv=KvState(page_size=4, size=100_000, free_runs=[]),
        contents=contents or {},
    )


def make_request(rid: str, last_node: int, working: int, ping_pong: tuple[int, int], last_track_idx: int = 1) -> RequestRecord:
    return RequestRecord(
        rid=Rid(rid),
        state="running",
        row=0,
        prompt_len=64,
        output_len=3,
        prefix_len=48,
        cache_protected_len=48,
        committed_len=64,
        allocated_len=67,
        last_node=NodeId(last_node),
        working_slot=SlotId(working),
        ping_pong=[SlotId(s) for s in ping_pong],
        ping_pong_empty=[False, False],
        next_track_idx=1 - last_track_idx,
        last_track_idx=last_track_idx,
        last_track_seqlen=64,
        prev_track_seqlen=48,
        cow_source=SlotId(-1),
        needs_clear=False,
        kv_runs=[(0, 67)],
    )


def small_state() -> CacheState:
    """root 0 -> 1 (locked, slot 1) -> {2 (evictable, slot 2), 3 (locked) -> 4 (locked, slot 3)}; 0 -> 5 (tombstone);
    request `req-a` at node 4 with working slot 5 and ping-pong 6 / 7 (7 last tracked)."""
    return make_state(
        {0: -1, 1: 0, 2: 1, 3: 1, 4: 3, 5: 0},
        slots={1: 1, 2: 2, 4: 3},
        locked={1, 3, 4},
        evictable={2, 5},
        tombstones={5},
        requests=[make_request("req-a", 4, 5, (6, 7))],
        contents={1: SlotContent(slot=SlotId(1), fingerprint=0xABCDEF0123456789, nonfinite=0, zero=False, step=Step(2))},
    )


def random_state(n: int, seed: int, fanout_bias: float) -> CacheState:
    """`fanout_bias` near 1: long chains; near 0: bushy."""
    rng = random.Random(seed)
    parents = {0: -1}
    for node in range(1, n):
        parents[node] = node - 1 if rng.random() < fanout_bias else rng.randrange(0, node)
    slots = {node: node for node in range(1, n) if rng.random() < 0.5}
    locked = set()
    walk = rng.randrange(1, n)
    last = walk
    while walk > 0:
        locked.add(walk)
        walk = parents[walk]
    requests = [make_request("r0", last, n + 1, (n + 2, n + 3))]
    return make_state(parents, slots=slots, locked=locked, evictable={n - 1}, requests=requests)
