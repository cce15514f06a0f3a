"""TUI responsiveness on a large cache: 100k tree nodes, 10k mamba slots (goal: < 50 ms a frame).

Builds a synthetic state through the schema (5,000 conversations of 20 turns under one root,
one tree-owned slot every third node, 10k slots with working and ping-pong owners), runs the
real app headless and prints:
  time to first paint, the page index build (once, on a worker thread after the first paint),
  per-keypress latency (tree moves, expand, first show of each tab, tab switches, table moves,
  step back), and per-update time while following a live source (a new frame with a few
  changed nodes and slots), on the slot map and on the page map.
Not a timed test: numbers depend on the machine. Run:
  PYTHONPATH=... .venv/bin/python tests/bench/bench_tui.py
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import time
from dataclasses import dataclass

from textual.pilot import Pilot

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
    pack_tokens,
)
from mcinspect.tui import InspectorApp, StaticSource
from mcinspect.tui.model import FrameView
from mcinspect.tui.source import NodeChanges
from mcinspect.tui.static_source import StaticFrame

CONVERSATIONS = 5_000
TURNS = 20
SLOTS = 10_000
PAGE = 16
TURN_TOKENS = 64
SIZE = (160, 48)


def build_state(seed: int = 0) -> CacheState:
    """100,001 nodes: a root, CONVERSATIONS chains of TURNS nodes; 10k slots; 1k requests."""
    rng = random.Random(seed)
    nodes: dict[NodeId, NodeRecord] = {}
    slots: dict[SlotId, list[SlotClaim]] = {}
    next_slot = 1

    def add(node_id: int, parent: int, depth: int, slot: int) -> None:
        nodes[NodeId(node_id)] = NodeRecord(
            id=NodeId(node_id), parent=NodeId(parent), depth=depth, key_len=TURN_TOKENS if node_id else 0,
            tokens=pack_tokens([rng.randrange(100, 150_000) for _ in range(32)]) if node_id else b"", key_hash=node_id,
            kv_runs=[(node_id * TURN_TOKENS, TURN_TOKENS)] if node_id else [], kv_evicted=False, mamba_slot=SlotId(slot),
            full_lock=0, mamba_lock=0, in_full_lru=True, in_mamba_lru=slot >= 0, evictable=True,
            last_access=float(node_id), hit_count=0, tombstone=False,
        )  # fmt: skip

    add(0, -1, 0, -1)
    node_id = 1
    for _ in range(CONVERSATIONS):
        parent, depth = 0, 0
        for _ in range(TURNS):
            slot = -1
            if node_id % 3 == 0 and next_slot <= SLOTS // 2:
                slot = next_slot
                slots[SlotId(slot)] = [SlotClaim(slot=SlotId(slot), kind="tree", node=NodeId(node_id), seqlen=depth + TURN_TOKENS)]
                next_slot += 1
            add(node_id, parent, depth, slot)
            parent, depth, node_id = node_id, depth + TURN_TOKENS, node_id + 1
    requests: dict[Rid, RequestRecord] = {}
    for r in range(1_000):
        rid = Rid(f"r{r}")
        working, pp0, pp1 = next_slot, next_slot + 1, next_slot + 2
        next_slot += 3
        slots[SlotId(working)] = [SlotClaim(slot=SlotId(working), kind="working", rid=rid)]
        slots[SlotId(pp0)] = [SlotClaim(slot=SlotId(pp0), kind="ping_pong", rid=rid, ping_pong_index=0, last_tracked=True, seqlen=128)]
        slots[SlotId(pp1)] = [SlotClaim(slot=SlotId(pp1), kind="ping_pong", rid=rid, ping_pong_index=1)]
        requests[rid] = RequestRecord(
            rid=rid, state="running", row=r, prompt_len=256, output_len=8, prefix_len=128, cache_protected_len=128,
            committed_len=136, allocated_len=264, last_node=NodeId(1 + r * TURNS + 1), working_slot=SlotId(working),
            ping_pong=[SlotId(pp0), SlotId(pp1)], ping_pong_empty=[False, False], next_track_idx=1, last_track_idx=0,
            last_track_seqlen=128, prev_track_seqlen=112, cow_source=SlotId(-1), needs_clear=False,
            kv_runs=[(r * 264, 264)],
        )  # fmt: skip
    for slot in range(next_slot, SLOTS + 1):
        slots[SlotId(slot)] = [SlotClaim(slot=SlotId(slot), kind="free")]
    kv_size = (node_id + 1) * TURN_TOKENS
    return CacheState(step=Step(1), nodes=nodes, slots=slots, requests=requests, kv=KvState(page_size=PAGE, size=kv_size, free_runs=[]))


def next_state(state: CacheState, rng: random.Random) -> tuple[CacheState, NodeChanges]:
    """One step later: ten nodes touched, ten slots changing hands (records replaced, as deltas
    do), and the node changes a Session's delta would report."""
    nodes, slots = dict(state.nodes), dict(state.slots)
    touched = rng.sample(range(1, len(nodes)), 10)
    for node_id in touched:
        old = nodes[NodeId(node_id)]
        nodes[NodeId(node_id)] = NodeRecord(**{f: getattr(old, f) for f in old.__struct_fields__} | {"hit_count": old.hit_count + 1})
    for slot in rng.sample(range(SLOTS // 2 + 3_001, SLOTS), 10):
        kind = "free" if slots[SlotId(slot)][0].kind != "free" else "working"
        slots[SlotId(slot)] = [SlotClaim(slot=SlotId(slot), kind=kind, rid=Rid("" if kind == "free" else "new"))]
    new = CacheState(step=Step(state.step + 1), nodes=nodes, slots=slots, requests=state.requests, kv=state.kv)
    return new, NodeChanges(upserted=tuple(NodeId(n) for n in touched), removed=())


@dataclass
class GrowingSource(StaticSource):
    """A live source whose frames the benchmark appends, as a Session's reader would."""

    live: bool = True

    def start(self, notify) -> None:  # type: ignore[no-untyped-def]
        self._notify = notify
        notify()

    def push(self, state: CacheState, changes: NodeChanges) -> None:
        index = len(self._frames)
        self.states = [*self.states, state]
        self.changes = [*self.changes, changes]
        self._frames.append(StaticFrame(index=index, seq=index + 1, step=state.step, received_at=float(index)))
        self._notify()


def report(label: str, samples_ms: list[float]) -> None:
    worst = max(samples_ms)
    flag = "" if worst < 50 else "   <-- over 50 ms"
    print(f"{label:<34} median {statistics.median(samples_ms):7.1f} ms   max {worst:7.1f} ms   (n={len(samples_ms)}){flag}")


async def press_timed(pilot, key: str, times: int) -> list[float]:  # type: ignore[no-untyped-def]
    """UI-thread CPU per key press, handling and repaint included.

    Wall time around `pilot.press` is dominated by the pilot's own waits (tens of ms for a key
    that does nothing); the event loop's CPU time is what a person waits for on a quiet machine.
    """
    samples = []
    for _ in range(times):
        began = time.thread_time()
        await pilot.press(key)
        await pilot.pause()
        samples.append((time.thread_time() - began) * 1000)
    return samples


async def main() -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (a busy machine inflates every figure)")
    began = time.perf_counter()
    state = build_state()
    print(
        f"built {len(state.nodes):,} nodes, {len(state.slots):,} slots, {len(state.requests):,} requests in {time.perf_counter() - began:.1f} s"
    )
    rng = random.Random(1)
    states, changes = [state], [None]
    for _ in range(4):
        state, change = next_state(states[-1], rng)
        states.append(state)
        changes.append(change)
    began = time.perf_counter()
    _ = FrameView(0, states[0], []).tree_pages  # the timed build
    print(f"{'page index: build (worker, once)':<34} {(time.perf_counter() - began) * 1000:7.1f} ms")
    source = GrowingSource(states=states, changes=changes, name="bench")
    app = InspectorApp(source, checks=None)

    began = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        while app.view is None:
            await pilot.pause()
        await pilot.pause()
        print(f"{'time to first paint':<34} {(time.perf_counter() - began) * 1000:7.1f} ms")
        await pilot.pause(0.2)  # a person's reaction time: the page index warms up meanwhile
        await app.workers.wait_for_complete()

        app.action_pause()  # hold the frame while measuring keys
        app.action_focus_tree()
        report("baseline: a key bound to nothing", await press_timed(pilot, "x", 10))
        report("tree: down", await press_timed(pilot, "down", 30))
        report("tree: pagedown", await press_timed(pilot, "pagedown", 10))
        await pilot.press("home")
        report("tree: expand/collapse (space)", await press_timed(pilot, "space", 10))
        report("tree: show 100 more children", await press_timed(pilot, "end", 1) + await press_timed(pilot, "enter", 5))
        report("slot map (tab 1): show", await press_timed(pilot, "1", 1))
        report("slot map: move", await press_timed(pilot, "right", 20))
        report("page map (tab 2): first show", await press_timed(pilot, "2", 1))
        report("page map: move", await press_timed(pilot, "down", 20))
        report("requests (tab 3): first show", await press_timed(pilot, "3", 1))
        report("requests: move", await press_timed(pilot, "down", 20))
        switches = []
        for _ in range(5):
            switches += await press_timed(pilot, "1", 1) + await press_timed(pilot, "3", 1)
        report("tab switch (1 <-> 3, shown before)", switches)
        await pilot.press("1")
        report("step back (whole UI)", await press_timed(pilot, "left_square_bracket", 3))

        await pilot.press("G")  # follow the live source again
        await pilot.pause(0.12)  # past the live throttle, as between the frames below
        cpu, wall = await follow(pilot, app, source, rng, 20)
        report("live update: UI-thread CPU", cpu)
        report("live update: wall to paint + ingest", wall)
        await pilot.press("2")
        cpu, _ = await follow(pilot, app, source, rng, 10)
        report("live update, page map shown: CPU", cpu)
        await app.workers.wait_for_complete()


async def follow(
    pilot: Pilot[None], app: InspectorApp, source: GrowingSource, rng: random.Random, frames: int
) -> tuple[list[float], list[float]]:
    """Push `frames` new frames one at a time; UI-thread CPU until each is shown, and wall time
    until it is painted and its ingest (the worker thread's checks) is done.

    Wall time stops at that paint, not after `pilot.pause()`: the pause waits for the process
    to look idle in 20 ms sleeps, so it added 20-40 ms of sleeping to every figure.
    """
    cpu, wall = [], []
    for _ in range(frames):
        source.push(*next_state(source.states[-1], rng))
        began, began_cpu = time.perf_counter(), time.thread_time()
        target = len(source.states) - 1
        while app.view is None or app.view.frame != target:
            await pilot.pause(0.001)
        painted = asyncio.Event()
        app.call_after_refresh(painted.set)
        await painted.wait()
        await app.workers.wait_for_complete()
        wall.append((time.perf_counter() - began) * 1000)
        await pilot.pause()
        cpu.append((time.thread_time() - began_cpu) * 1000)
        await pilot.pause(0.12)  # past the live throttle, so every update is a full redraw
    return cpu, wall


if __name__ == "__main__":
    asyncio.run(main())
