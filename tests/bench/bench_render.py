"""Render time and SVG size: 200 and 2,000 drawn nodes, and a 100k-node tree folded to
--max-nodes 2000 (goal: < 2 s end to end, DOT generation + Graphviz layout).

Trees are schema records shaped like a served workload: shared prefixes that branch, multi-turn
chains, mamba state on most nodes, a few running requests holding locks, working and ping-pong
slots. Needs a Graphviz binary (`dot`, or `pip install graphviz-pure`); without one it prints
the DOT timings alone.
"""

from __future__ import annotations

import random
import resource
import sys
import time

from mcinspect.render import DotNotFound, find_dot, render_dot, run_dot, select, tree_totals, view_totals
from mcinspect.schema import (
    CacheState,
    KvState,
    NodeId,
    NodeRecord,
    RequestRecord,
    Rid,
    SlotClaim,
    SlotId,
    Step,
    key_hash,
    pack_tokens,
)

PAGE = 16


def build(n_nodes: int, n_requests: int = 8, seed: int = 0) -> CacheState:
    rng = random.Random(seed)
    parent = [-1]
    for i in range(1, n_nodes):
        # Mostly extend a recent node (multi-turn chains), sometimes branch off an old one.
        parent.append(rng.randrange(max(0, i - 8), i) if rng.random() < 0.85 else rng.randrange(0, i))
    depth = [0] * n_nodes
    key_len = [0] + [PAGE * rng.randint(1, 8) for _ in range(1, n_nodes)]
    for i in range(1, n_nodes):
        depth[i] = depth[parent[i]] + key_len[parent[i]]
    has_child = set(parent[1:])
    locked: set[int] = set()
    requests: dict[Rid, RequestRecord] = {}
    leaves = [i for i in range(1, n_nodes) if i not in has_child]
    slots: dict[SlotId, list[SlotClaim]] = {}
    next_slot = 1
    node_slot = [-1] * n_nodes
    for i in range(1, n_nodes):
        if i not in has_child or rng.random() < 0.5:
            node_slot[i] = next_slot
            slots[SlotId(next_slot)] = [SlotClaim(slot=SlotId(next_slot), kind="tree", node=NodeId(i), seqlen=depth[i] + key_len[i])]
            next_slot += 1
    for r in range(n_requests):
        last = rng.choice(leaves)
        walk = last
        while walk > 0:
            locked.add(walk)
            walk = parent[walk]
        rid = Rid(f"req-{r:04d}")
        own = [SlotId(next_slot + k) for k in range(3)]
        next_slot += 3
        slots[own[0]] = [SlotClaim(slot=own[0], kind="working", rid=rid)]
        for k in (0, 1):
            slots[own[1 + k]] = [SlotClaim(slot=own[1 + k], kind="ping_pong", rid=rid, ping_pong_index=k, last_tracked=k == 0)]
        end = depth[last] + key_len[last]
        requests[rid] = RequestRecord(
            rid=rid,
            state="running",
            row=r,
            prompt_len=end,
            output_len=7,
            prefix_len=end,
            cache_protected_len=end,
            committed_len=end,
            allocated_len=end + 7,
            last_node=NodeId(last),
            working_slot=own[0],
            ping_pong=own[1:],
            ping_pong_empty=[False, True],
            next_track_idx=1,
            last_track_idx=0,
            last_track_seqlen=end,
            prev_track_seqlen=0,
            cow_source=SlotId(-1),
            needs_clear=False,
            kv_runs=[(0, end + 7)],
        )
    nodes = {}
    for i in range(n_nodes):
        tokens = [rng.randrange(3, 50_000) for _ in range(min(key_len[i], 32))]
        lock = 1 if i in locked else 0
        nodes[NodeId(i)] = NodeRecord(
            id=NodeId(i),
            parent=NodeId(parent[i]),
            depth=depth[i],
            key_len=key_len[i],
            tokens=pack_tokens(tokens),
            key_hash=key_hash(tokens),
            kv_runs=[(depth[i] * 3, key_len[i])] if key_len[i] else [],
            kv_evicted=False,
            mamba_slot=SlotId(node_slot[i]),
            full_lock=lock,
            mamba_lock=lock,
            in_full_lru=not lock,
            in_mamba_lru=node_slot[i] != -1 and not lock,
            evictable=i not in has_child and not lock,
            last_access=float(i),
            hit_count=i % 3,
            tombstone=False,
        )
    return CacheState(
        step=Step(1), nodes=nodes, slots=slots, requests=requests, kv=KvState(page_size=PAGE, size=n_nodes * 400, free_runs=[])
    )


def case(label: str, state: CacheState, max_nodes: int) -> None:
    began, began_cpu = time.perf_counter(), time.process_time()
    view = select(state, max_nodes=max_nodes, pinned=[r.last_node for r in state.requests.values()])
    assert view_totals(view) == tree_totals(state)
    select_s = time.process_time() - began_cpu
    began, began_cpu = time.perf_counter(), time.process_time()
    source = render_dot(state, max_nodes=max_nodes)
    dot_wall, dot_cpu = time.perf_counter() - began, time.process_time() - began_cpu
    line = f"{label:<32} boxes {view.boxes:>5}  render_dot {dot_cpu:5.2f} s cpu ({select_s:4.2f} folding), {len(source) / 1e6:4.1f} MB"
    try:
        binary = find_dot()
    except DotNotFound as exc:
        print(f"{line}  (no layout: {exc})")
        return
    # CPU time as well as wall time: on a shared machine the wall clock measures the neighbours.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    laid = time.perf_counter()
    svg = run_dot(source, "svg", timeout_s=120, binary=binary)
    layout_wall = time.perf_counter() - laid
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    layout_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    print(
        f"{line}  layout {layout_cpu:5.2f} s cpu  total {dot_cpu + layout_cpu:5.2f} s cpu "
        f"({dot_wall + layout_wall:5.2f} s wall)  svg {len(svg) / 1e6:4.1f} MB  [{binary.source}]"
    )


def main() -> None:
    big = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    case("200 nodes, all drawn", build(200), 500)
    case("2,000 nodes, all drawn", build(2_000), 2_000)
    began = time.perf_counter()
    state = build(big)
    print(f"(built a {big:,}-node tree in {time.perf_counter() - began:.1f} s)")
    case(f"{big:,} nodes folded to 2,000", state, 2_000)


if __name__ == "__main__":
    main()
