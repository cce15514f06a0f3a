"""Deterministic input for the TUI tests: a small cache over four steps, one violation.

Everything the tests show comes from `demo_states()` (and `demo_events()` / `demo_info()` for
the log and the header), built from schema structs. The shape follows extra_buffer with overlap:
each running request holds a working slot and two ping-pong slots. At the last step node #8 is
inserted with slot 14 while r-a1 still tracks into it: the "slot owned twice" bug.
Recordings from the real engine can replace this module's states without touching the tests.
"""

from __future__ import annotations

import random

from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    EngineInfo,
    Event,
    InsertEvent,
    KvState,
    LockEvent,
    MatchEvent,
    NodeId,
    NodeRecord,
    RequestEvent,
    RequestRecord,
    Rid,
    Runs,
    SlotClaim,
    SlotEvent,
    SlotId,
    Step,
    TrackPlanEvent,
    key_hash,
    pack_tokens,
)
from mcinspect.checks import Violation
from mcinspect.tui.model import slot_owner
from mcinspect.tui.source import FrameMeta

PAGE = 16
SLOTS = 24
KV_TOKENS = 640
FIRST_STEP = 40

# node id -> (parent, depth, key_len, mamba slot, first token id)
_TREE: dict[int, tuple[int, int, int, int, int]] = {
    0: (-1, 0, 0, -1, 0),
    1: (0, 0, 64, 3, 151644),
    2: (1, 64, 64, 5, 872),
    3: (1, 64, 48, -1, 3555),
    4: (2, 128, 48, 6, 1010),
    5: (0, 0, 48, 9, 151645),
    6: (5, 48, 48, 10, 2048),
    7: (3, 112, 48, 8, 4096),
}
_NEW_NODE = (4, 176, 16, 14, 7777)
"""Node #8, inserted at the last step with a slot r-a1 still holds."""


def demo_info() -> EngineInfo:
    return EngineInfo(
        schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="/models/tiny-qwen3-next",
        strategy="extra_buffer", page_size=PAGE, overlap=True, tree_core="python", full_tree_detail=True,
        mamba_pool_size=SLOTS, kv_pool_tokens=KV_TOKENS, tp_rank=0, dp_rank=0, pid=4242,
        request_port=7777, stream_port=7778,
    )  # fmt: skip


def _node(node_id: int, parent: int, depth: int, key_len: int, slot: int, first: int, locks: tuple[int, int], base: int) -> NodeRecord:
    rng = random.Random(first)
    tokens = [first] + [rng.randrange(100, 150_000) for _ in range(key_len - 1)] if key_len else []
    return NodeRecord(
        id=NodeId(node_id), parent=NodeId(parent), depth=depth, key_len=key_len,
        tokens=pack_tokens(tokens[:32]), key_hash=key_hash(tokens), kv_runs=[(base + depth, key_len)] if key_len else [],
        kv_evicted=False, mamba_slot=SlotId(slot), full_lock=locks[0], mamba_lock=locks[1],
        in_full_lru=node_id != 0, in_mamba_lru=slot >= 0, evictable=locks[0] == 0 and node_id != 0,
        last_access=float(node_id), hit_count=node_id % 3, tombstone=node_id == 3,
    )  # fmt: skip


def _nodes(step: int) -> dict[NodeId, NodeRecord]:
    # A request's lock is anchored at its last node (mamba lock) and held by every node above
    # it (full lock); sglang's root keeps a permanent 1 of each.
    anchors = [8 if step >= FIRST_STEP + 3 else 4] + ([5] if step >= FIRST_STEP + 1 else [])
    # KV token index = base + depth; branches get separate regions so that pages never overlap.
    bases = {0: PAGE, 1: PAGE, 2: PAGE, 4: PAGE, 3: 10 * PAGE, 7: 10 * PAGE, 5: 21 * PAGE, 6: 21 * PAGE}
    nodes = {}
    shape = dict(_TREE)
    if step >= FIRST_STEP + 3:
        shape[8] = _NEW_NODE
        bases[8] = PAGE
    full = dict.fromkeys(shape, 0)
    for anchor in anchors:
        node_id = anchor
        while node_id > 0:
            full[node_id] += 1
            node_id = shape[node_id][0]
    for node_id, (parent, depth, key_len, slot, first) in shape.items():
        locks = (1, 1) if node_id == 0 else (full[node_id], anchors.count(node_id))
        nodes[NodeId(node_id)] = _node(node_id, parent, depth, key_len, slot, first, locks, bases[node_id])
    return nodes


def _request(rid: str, state: str, row: int, prompt: int, out: int, prefix: int, last_node: int, working: int,
             ping_pong: list[int], empty: list[bool], last_idx: int, seqlen: int, cow: int, runs: Runs) -> RequestRecord:
    return RequestRecord(
        rid=Rid(rid), state=state, row=row, prompt_len=prompt, output_len=out, prefix_len=prefix,  # type: ignore[arg-type]
        cache_protected_len=prefix, committed_len=prefix + out, allocated_len=sum(n for _, n in runs), last_node=NodeId(last_node),
        working_slot=SlotId(working), ping_pong=[SlotId(s) for s in ping_pong], ping_pong_empty=empty,
        next_track_idx=1 - last_idx if last_idx >= 0 else 0, last_track_idx=last_idx, last_track_seqlen=seqlen,
        prev_track_seqlen=max(-1, seqlen - PAGE), cow_source=SlotId(cow), needs_clear=False, kv_runs=runs,
    )  # fmt: skip


def _requests(step: int) -> dict[Rid, RequestRecord]:
    k = step - FIRST_STEP
    out_a = 4 + k
    a_runs = [(PAGE, 200 + out_a)]
    last_a = 1 if k % 2 == 0 else 0
    prefix_a, last_node_a = (176, 4) if k < 3 else (192, 8)
    reqs = [_request("r-a1", "running", 1, 200, out_a, prefix_a, last_node_a, 12, [13, 14], [False, False], last_a, 160 + 16 * (k % 2), -1, a_runs)]
    if k == 0:
        reqs.append(_request("r-b1", "waiting", -1, 120, 0, 0, -1, -1, [], [], -1, -1, -1, []))
    else:
        b_runs = [(21 * PAGE, 48), (30 * PAGE, 16 * k)]
        reqs.append(_request("r-b1", "chunked" if k < 3 else "running", 2, 120, 0, 48, 5, 15, [16, 17], [False, False], 0, 48 + 16 * (k - 1), 9 if k == 1 else -1, b_runs))
    reqs.append(_request("r-w2", "waiting", -1, 300, 0, 0, -1, -1, [], [], -1, -1, -1, []))
    return {r.rid: r for r in reqs}


def _claims(nodes: dict[NodeId, NodeRecord], requests: dict[Rid, RequestRecord]) -> dict[SlotId, list[SlotClaim]]:
    claims: dict[SlotId, list[SlotClaim]] = {SlotId(s): [] for s in range(1, SLOTS + 1)}
    for node in nodes.values():
        if node.mamba_slot >= 0:
            claims[node.mamba_slot].append(SlotClaim(slot=node.mamba_slot, kind="tree", node=node.id, seqlen=node.depth + node.key_len))
    for req in requests.values():
        if req.working_slot >= 0:
            claims[req.working_slot].append(SlotClaim(slot=req.working_slot, kind="working", rid=req.rid))
        for index, slot in enumerate(req.ping_pong):
            if not req.ping_pong_empty[index]:
                last = index == req.last_track_idx
                claims[slot].append(SlotClaim(slot=slot, kind="ping_pong", rid=req.rid, ping_pong_index=index, last_tracked=last, seqlen=req.last_track_seqlen if last else -1))
        if req.cow_source >= 0:
            claims[req.cow_source].append(SlotClaim(slot=req.cow_source, kind="cow_source", rid=req.rid))
    for slot, held in claims.items():
        if not held:
            held.append(SlotClaim(slot=slot, kind="free"))
    return claims


def _free_runs(nodes: dict[NodeId, NodeRecord], requests: dict[Rid, RequestRecord]) -> Runs:
    used = bytearray(KV_TOKENS // PAGE)
    for runs in [n.kv_runs for n in nodes.values()] + [r.kv_runs for r in requests.values()]:
        for start, length in runs:
            for page in range(start // PAGE, (start + length - 1) // PAGE + 1):
                used[page] = 1
    used[0] = 1  # page 0 is sglang's padding page: never free, never owned
    free: Runs = []
    for page, taken in enumerate(used):
        if not taken:
            free.append((page * PAGE, PAGE))
    return free


def demo_states() -> list[CacheState]:
    """Four consecutive steps of one scheduler process."""
    states = []
    for step in range(FIRST_STEP, FIRST_STEP + 4):
        nodes, requests = _nodes(step), _requests(step)
        states.append(
            CacheState(
                step=Step(step),
                nodes=nodes,
                slots=_claims(nodes, requests),
                requests=requests,
                kv=KvState(page_size=PAGE, size=KV_TOKENS, free_runs=_free_runs(nodes, requests)),
            )
        )
    return states


def demo_events() -> list[list[Event]]:
    """What happened during each of the four steps."""
    s = [Step(FIRST_STEP + k) for k in range(4)]
    return [
        [TrackPlanEvent(step=s[0], rid=Rid("r-a1"), slot=SlotId(14), position=160)],
        [
            RequestEvent(step=s[1], rid=Rid("r-b1"), what="admit"),
            MatchEvent(step=s[1], rid=Rid("r-b1"), hit_len=48, node=NodeId(5), cow_source=SlotId(9)),
            LockEvent(step=s[1], node=NodeId(5), rid=Rid("r-b1"), locked=True),
            SlotEvent(step=s[1], slots=[SlotId(15), SlotId(16), SlotId(17)], allocated=True),
            TrackPlanEvent(step=s[1], rid=Rid("r-a1"), slot=SlotId(13), position=176),
        ],
        [TrackPlanEvent(step=s[2], rid=Rid("r-b1"), slot=SlotId(16), position=64)],
        [InsertEvent(step=s[3], rid=Rid("r-a1"), node=NodeId(8), slot=SlotId(14), seqlen=192, ping_pong_index=1)],
    ]


def demo_checker(previous: CacheState | None, state: CacheState, frame: FrameMeta) -> list[Violation]:
    """A stand-in for mcinspect.checks with a fixed reason text: slots claimed twice."""
    found = []
    for slot, claims in sorted(state.slots.items()):
        if slot_owner(claims).name == "MULTIPLE":
            tree = [c.node for c in claims if c.kind == "tree"]
            other = next(c for c in claims if c.kind != "tree")
            found.append(
                Violation(
                    check="slot-partition",
                    step=Step(state.step),
                    reason=f"slot {slot} is the value of node #{tree[0]} and {other.rid}'s {other.kind}[{other.ping_pong_index}]",
                    nodes=tuple(tree),
                    slots=(slot,),
                    rids=(other.rid,),
                )
            )
    return found
