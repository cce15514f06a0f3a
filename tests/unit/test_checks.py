"""The checks, on cache states built directly from schema structs.

`World` keeps a small consistent cache (nodes, mamba slots, requests, KV) the way sglang would
hold it and renders `CacheState`s whose claims, locks and free lists follow from it, like the
adapter's. `clean_history` walks one request through extra_buffer caching with overlap
(admit, track, donate, decode, finish) and a second through a copy-on-write hit and an
eviction: every check must stay silent on it. Each corrupted case changes one thing in that
history and expects exactly the violation it should cause, with the right ids and step.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field

import msgspec
import pytest

from mcinspect.checks import CHECKS, NOT_CHECKED, StepView, UnknownCheck, Violation, check_step, run_checks, views
from mcinspect.checks.kv import first_overlap, truncate
from mcinspect.checks.writes import check_write_target
from mcinspect.run_edits import as_runs, intervals, subtract
from mcinspect.schema import (
    CacheState,
    CowEvent,
    EngineInfo,
    Event,
    EvictEvent,
    InsertEvent,
    KvState,
    MatchEvent,
    NodeId,
    NodeRecord,
    RequestEvent,
    RequestRecord,
    Rid,
    Runs,
    SlotClaim,
    SlotContent,
    SlotEvent,
    SlotId,
    Step,
    TrackPlanEvent,
    TrackWriteEvent,
)

import factory

replace = msgspec.structs.replace
ROOT = NodeId(0)
R1, R2 = Rid("r1"), Rid("r2")


def engine(strategy: str = "extra_buffer", overlap: bool = True, track_writes: str = "all") -> EngineInfo:
    return EngineInfo(
        schema_version=2,
        sglang_version="0.5.23",
        model_path="tiny",
        strategy=strategy,
        page_size=1,
        overlap=overlap,
        tree_core="UnifiedTreeCore",
        full_tree_detail=True,
        mamba_pool_size=8,
        kv_pool_tokens=4096,
        tp_rank=0,
        dp_rank=0,
        pid=1,
        request_port=7777,
        stream_port=7778,
        track_writes=track_writes,  # type: ignore[arg-type]
    )


def record(node_id: int, parent: int, depth: int, key_len: int, slot: int = -1, kv: Runs | None = None) -> NodeRecord:
    runs = [(1000 * node_id, key_len)] if kv is None else kv
    return factory.node(node_id, parent, depth, key_len, slot=slot, token_ids=[], kv_runs=runs, in_full_lru=False, evictable=False)


def request(rid: Rid, **fields: object) -> RequestRecord:
    base = dict(
        rid=rid,
        state="running",
        row=1,
        prompt_len=100,
        output_len=0,
        prefix_len=0,
        cache_protected_len=0,
        committed_len=0,
        allocated_len=100,
        last_node=ROOT,
        working_slot=SlotId(-1),
        ping_pong=[],
        ping_pong_empty=[],
        next_track_idx=-1,
        last_track_idx=-1,
        last_track_seqlen=-1,
        prev_track_seqlen=-1,
        cow_source=SlotId(-1),
        needs_clear=False,
        kv_runs=[],
    )
    base.update(fields)
    return RequestRecord(**base)  # type: ignore[arg-type]


@dataclass
class World:
    """A consistent cache; `state()` renders it like the adapter would."""

    size: int = 8
    kv_tokens: int = 100_000
    page: int = 1
    nodes: dict[NodeId, NodeRecord] = field(default_factory=lambda: {ROOT: replace(record(0, -1, 0, 0, kv=[]), full_lock=1, mamba_lock=1)})
    requests: dict[Rid, RequestRecord] = field(default_factory=dict)
    private: dict[Rid, Runs] = field(default_factory=dict)
    free: list[int] = field(default_factory=list)
    contents: dict[SlotId, SlotContent] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free = list(range(1, self.size + 1))

    def alloc(self, n: int) -> list[SlotId]:
        taken, self.free = self.free[:n], self.free[n:]
        return [SlotId(s) for s in taken]

    def release(self, *slots: int) -> None:
        self.free += list(slots)

    def add(self, node_id: int, parent: int, key_len: int, slot: int, kv_start: int) -> None:
        above = self.nodes[NodeId(parent)]
        self.nodes[NodeId(node_id)] = record(node_id, parent, above.depth + above.key_len, key_len, slot, kv=[(kv_start, key_len)])

    def path_runs(self, node_id: NodeId) -> Runs:
        path = []
        node = self.nodes.get(node_id)
        while node is not None and node.parent >= 0:
            path.append(node)
            node = self.nodes.get(node.parent)
        return [run for node in reversed(path) for run in node.kv_runs]

    def put(self, rid: Rid, private: Runs = (), **fields: object) -> None:
        """Create or update a request; its row is its tree path's KV, then its private tail."""
        old = self.requests.get(rid)
        merged = request(rid, **fields) if old is None else replace(old, **fields)
        if private:
            self.private[rid] = list(private)
        tree = _truncate(self.path_runs(merged.last_node), merged.cache_protected_len)
        self.requests[rid] = replace(merged, kv_runs=tree + self.private.get(rid, []))

    def fingerprint(self, slot: int, value: int, step: int) -> None:
        self.contents[SlotId(slot)] = SlotContent(SlotId(slot), value, 0, False, Step(step))

    def state(self, step: int) -> CacheState:
        nodes = self._locked()
        claims: dict[SlotId, list[SlotClaim]] = {SlotId(s): [] for s in range(1, self.size + 1)}
        for s in self.free:
            claims[SlotId(s)].append(SlotClaim(SlotId(s), "free"))
        for node in nodes.values():
            if node.mamba_slot >= 0:
                claims[node.mamba_slot].append(SlotClaim(node.mamba_slot, "tree", node=node.id, seqlen=node.depth + node.key_len))
        for r in self.requests.values():
            if r.working_slot >= 0:
                claims[r.working_slot].append(SlotClaim(r.working_slot, "working", rid=r.rid))
            for i, s in enumerate(r.ping_pong):
                if s >= 0:
                    claims[s].append(SlotClaim(s, "ping_pong", rid=r.rid, ping_pong_index=i, last_tracked=i == r.last_track_idx))
            if r.cow_source >= 0:
                claims[r.cow_source].append(SlotClaim(r.cow_source, "cow_source", rid=r.rid))
        for s, listed in claims.items():
            if not listed:
                listed.append(SlotClaim(s, "unaccounted"))
        used = [run for n in nodes.values() if not n.kv_evicted for run in n.kv_runs]
        used += [run for runs in self.private.values() for run in runs]
        kv = KvState(page_size=self.page, size=self.kv_tokens, free_runs=_complement(used, self.kv_tokens))
        return CacheState(step=Step(step), nodes=nodes, slots=claims, requests=dict(self.requests), kv=kv, contents=dict(self.contents))

    def _locked(self) -> dict[NodeId, NodeRecord]:
        """Lock refs as sglang keeps them: FULL along each live request's path, MAMBA on its anchor."""
        full: dict[NodeId, int] = {}
        mamba: dict[NodeId, int] = {}
        for r in self.requests.values():
            if r.state not in ("running", "chunked") or r.last_node == ROOT:
                continue
            mamba[r.last_node] = mamba.get(r.last_node, 0) + 1
            node = self.nodes[r.last_node]
            while node.parent >= 0:
                full[node.id] = full.get(node.id, 0) + 1
                node = self.nodes[node.parent]
        return {i: n if i == ROOT else replace(n, full_lock=full.get(i, 0), mamba_lock=mamba.get(i, 0)) for i, n in self.nodes.items()}


def _truncate(runs: Runs, tokens: int) -> Runs:
    out: Runs = []
    for start, length in runs:
        take = min(length, tokens)
        if take <= 0:
            break
        tokens -= take
        if out and sum(out[-1]) == start:
            out[-1] = (out[-1][0], out[-1][1] + take)
        else:
            out.append((start, take))
    return out


def _complement(used: Runs, size: int) -> Runs:
    free: Runs = []
    cursor = 0
    for start, length in sorted(used):
        if start > cursor:
            free.append((cursor, start - cursor))
        cursor = max(cursor, start + length)
    if cursor < size:
        free.append((cursor, size - cursor))
    return free


Step_ = tuple[CacheState, list[Event]]


def clean_history() -> list[Step_]:
    """r1: admitted, prefill tracked at 64, donated (node 1), decode tracked at 128, finished
    (node 2). r2: matches node 2 with a copy-on-write of slot 3, runs, finishes uncached.
    Then node 2 is evicted. Overlap scheduling, two ping-pong entries, eager extra_buffer."""
    w = World()
    out: list[Step_] = []
    # step 1: admission; prefill plans slot 2 (ping-pong 0) at position 64
    working, pp = w.alloc(1), w.alloc(2)
    w.put(
        R1,
        private=[(50_000, 100)],
        working_slot=working[0],
        ping_pong=pp,
        ping_pong_empty=[False, False],
        next_track_idx=1,
        last_track_idx=0,
        last_track_seqlen=64,
    )
    out.append(
        (
            w.state(1),
            [
                MatchEvent(step=Step(1), rid=R1, hit_len=0, node=ROOT, cow_source=SlotId(-1)),
                SlotEvent(step=Step(1), slots=working, allocated=True),
                SlotEvent(step=Step(1), slots=pp, allocated=True),
                RequestEvent(step=Step(1), rid=R1, what="admit"),
                TrackPlanEvent(step=Step(1), rid=R1, slot=pp[0], position=64, forward="extend"),
                CowEvent(
                    step=Step(1),
                    sources=[],
                    destinations=[],
                    source_fingerprints=[],
                    destination_fingerprints=[],
                    cleared=[working[0]],
                    cleared_zero=[True],
                ),
                TrackWriteEvent(step=Step(1), forward="extend", rids=[R1], mask=[True], planned=[pp[0]], positions=[64], written=[pp[0]]),
            ],
        )
    )
    # step 2: checkpoint donates slot 2 to node 1 (depth 0..64); slot 4 replaces it
    (fresh,) = w.alloc(1)
    w.add(1, 0, 64, slot=pp[0], kv_start=50_000)
    w.private[R1] = [(50_064, 36)]
    w.put(R1, ping_pong=[fresh, pp[1]], last_node=NodeId(1), cache_protected_len=64, prefix_len=64)
    w.fingerprint(pp[0], 0xA1, 2)
    out.append(
        (
            w.state(2),
            [
                SlotEvent(step=Step(2), slots=[fresh], allocated=True),
                InsertEvent(step=Step(2), rid=R1, node=NodeId(1), slot=pp[0], seqlen=64, ping_pong_index=0),
            ],
        )
    )
    # step 3: decode boundary: slot 3 (ping-pong 1) planned at 128; slot 2 fingerprinted again
    w.private[R1] = [(50_064, 100)]
    w.put(R1, output_len=28, allocated_len=164, next_track_idx=0, last_track_idx=1, last_track_seqlen=128, prev_track_seqlen=64)
    w.fingerprint(pp[0], 0xA1, 3)
    out.append(
        (
            w.state(3),
            [
                TrackPlanEvent(step=Step(3), rid=R1, slot=pp[1], position=128, forward="decode"),
                TrackWriteEvent(
                    step=Step(3),
                    forward="decode",
                    rids=[R1, Rid("")],
                    mask=[True, False],
                    planned=[pp[1], SlotId(0)],
                    positions=[128, -1],
                    written=[pp[1], SlotId(0)],
                ),
            ],
        )
    )
    # step 4: r1 finishes: slot 3 cached at node 2 (64..128); working and slot 4 freed
    w.add(2, 1, 64, slot=pp[1], kv_start=50_064)
    del w.requests[R1], w.private[R1]
    w.release(working[0], fresh)
    w.fingerprint(pp[1], 0xB2, 4)
    out.append(
        (
            w.state(4),
            [
                InsertEvent(step=Step(4), rid=R1, node=NodeId(2), slot=pp[1], seqlen=128, ping_pong_index=1),
                SlotEvent(step=Step(4), slots=[working[0]], allocated=False),
                SlotEvent(step=Step(4), slots=[fresh], allocated=False),
                RequestEvent(step=Step(4), rid=R1, what="finish"),
            ],
        )
    )
    # step 5: r2 hits node 2 (128 tokens) and copies slot 3 into a fresh working slot
    (dst,) = w.alloc(1)
    pp2 = w.alloc(2)
    w.put(
        R2,
        private=[(60_000, 40)],
        working_slot=dst,
        ping_pong=pp2,
        ping_pong_empty=[False, False],
        next_track_idx=0,
        last_track_idx=1,
        last_node=NodeId(2),
        cache_protected_len=128,
        prefix_len=128,
        allocated_len=168,
        row=2,
    )
    out.append(
        (
            w.state(5),
            [
                SlotEvent(step=Step(5), slots=[dst], allocated=True),
                MatchEvent(step=Step(5), rid=R2, hit_len=128, node=NodeId(2), cow_source=pp[1]),
                SlotEvent(step=Step(5), slots=pp2, allocated=True),
                RequestEvent(step=Step(5), rid=R2, what="admit"),
                CowEvent(
                    step=Step(5),
                    sources=[pp[1]],
                    destinations=[dst],
                    source_fingerprints=[],
                    destination_fingerprints=[],
                    cleared=[],
                    cleared_zero=[],
                ),
            ],
        )
    )
    # step 6: r2 finishes without caching anything
    del w.requests[R2], w.private[R2]
    w.release(dst, *pp2)
    out.append(
        (w.state(6), [SlotEvent(step=Step(6), slots=[dst, *pp2], allocated=False), RequestEvent(step=Step(6), rid=R2, what="finish")])
    )
    # step 7: node 2 is evicted with its slot 3
    del w.nodes[NodeId(2)]
    w.release(pp[1])
    out.append(
        (
            w.state(7),
            [
                SlotEvent(step=Step(7), slots=[pp[1]], allocated=False),
                EvictEvent(step=Step(7), nodes=[NodeId(2)], slots=[pp[1]], tokens=64),
            ],
        )
    )
    return out


def run(history: list[Step_], info: EngineInfo | None = None, names: list[str] | None = None) -> list[Violation]:
    return run_checks(views(history, info or engine()), names)


def edit(history: list[Step_], index: int, *, state: CacheState | None = None, events: list[Event] | None = None) -> list[Step_]:
    out = list(history)
    out[index] = (state or history[index][0], history[index][1] if events is None else events)
    return out


def only(violations: list[Violation], check: str) -> Violation:
    assert [v.check for v in violations] == [check], violations
    return violations[0]


# --- the clean run -----------------------------------------------------------------------


def test_clean_history_has_no_violations() -> None:
    assert run(clean_history()) == []


def test_clean_history_without_engine_info_or_history_is_silent() -> None:
    history = clean_history()
    assert run_checks(views(history)) == []
    for state, events in history:  # each step alone, as from snapshot files
        assert check_step(StepView.first(state, events)) == []


# --- invariant 1: slot partition ----------------------------------------------------------


def test_donated_slot_still_in_ping_pong_list_is_owned_twice() -> None:
    history = clean_history()
    state = history[1][0]
    state.requests[R1] = replace(state.requests[R1], ping_pong=[SlotId(2), SlotId(3)])
    state.slots[SlotId(2)] = state.slots[SlotId(2)] + [SlotClaim(SlotId(2), "ping_pong", rid=R1, ping_pong_index=0)]
    v = only(run(edit(history, 1, state=state), names=["slot-partition"]), "slot-partition")
    assert (v.step, v.slots, v.nodes, v.rids) == (2, (2,), (1,), (R1,))
    assert v.reason == "slot 2 is owned by node 1 (tree) and by request r1 (ping-pong 0)"


def test_leaked_slot_is_reported_once() -> None:
    history = clean_history()
    for index in (5, 6):  # slot 7 (r2's last ping-pong slot) never returns to the free list
        state = history[index][0]
        state.slots[SlotId(7)] = [SlotClaim(SlotId(7), "unaccounted")]
    v = only(run(history, names=["slot-partition"]), "slot-partition")
    assert (v.step, v.slots) == (6, (7,))
    assert "leaked" in v.reason


def test_node_holding_slot_outside_the_pool() -> None:
    history = clean_history()
    state = history[2][0]
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], mamba_slot=SlotId(99))
    violations = run(edit(history, 2, state=state), names=["slot-partition"])
    assert [(v.step, v.nodes, v.slots) for v in violations] == [(3, (1,), (99,))]
    assert "outside the pool 1..8" in violations[0].reason


def test_streaming_session_record_is_one_holder() -> None:
    """A streaming turn runs on its session's record: the adapter lists its slots under the
    request and under `session:<sid>`. That is one holder; a session claim on a tree slot is not."""
    history = clean_history()
    state = history[4][0]
    for slot in (5, 6, 7):
        twin = replace(state.slots[SlotId(slot)][0], rid=Rid("session:s1"))
        state.slots[SlotId(slot)] = state.slots[SlotId(slot)] + [twin]
    assert run(edit(history, 4, state=state), names=["slot-partition"]) == []
    state.slots[SlotId(2)] = state.slots[SlotId(2)] + [SlotClaim(SlotId(2), "working", rid=Rid("session:s1"))]
    v = only(run(edit(history, 4, state=state), names=["slot-partition"]), "slot-partition")
    assert v.slots == (2,) and v.reason == "slot 2 is owned by node 1 (tree) and by request session:s1 (working)"


# --- invariant 2: request slots -----------------------------------------------------------


def test_running_request_without_working_slot() -> None:
    history = clean_history()
    state = history[2][0]
    state.requests[R1] = replace(state.requests[R1], working_slot=SlotId(-1))
    v = only(run(edit(history, 2, state=state), names=["request-slots"]), "request-slots")
    assert (v.step, v.rids) == (3, (R1,))


def test_last_tracked_entry_empty_would_donate_minus_one() -> None:
    history = clean_history()
    state = history[2][0]
    state.requests[R1] = replace(state.requests[R1], ping_pong=[SlotId(4), SlotId(-1)], ping_pong_empty=[False, True])
    lazy = run(edit(history, 2, state=state), engine("extra_buffer_lazy"), names=["request-slots"])
    v = only(lazy, "request-slots")
    assert v.step == 3 and "a donation would cache slot -1" in v.reason
    eager = run(edit(history, 2, state=state), engine("extra_buffer"), names=["request-slots"])
    assert len(eager) == 2  # and the empty entry itself, which eager extra_buffer never has


def test_device_mirror_still_naming_the_donated_slot() -> None:
    """#24221: after the donation at step 2 the record names fresh slot 4, the ping-pong mirror
    the forward tracks into still names slot 2, which node 1 now holds."""
    history = clean_history()
    state = history[1][0]
    r1 = state.requests[R1]
    assert r1.ping_pong[0] == SlotId(4)
    in_sync = replace(r1, working_mirror=r1.working_slot, ping_pong_mirror=list(r1.ping_pong))
    state.requests[R1] = in_sync
    assert run(edit(history, 1, state=state), names=["request-slots"]) == []
    state.requests[R1] = replace(in_sync, ping_pong_mirror=[SlotId(2), r1.ping_pong[1]])
    v = only(run(edit(history, 1, state=state), names=["request-slots"]), "request-slots")
    assert v.step == 2 and v.slots == (SlotId(2), SlotId(4)) and v.rids == (R1,)
    assert "device mirror the forward tracks into names slot 2, which node 1 has cached" in v.reason
    state.requests[R1] = replace(in_sync, working_mirror=SlotId(9))
    v = only(run(edit(history, 1, state=state), names=["request-slots"]), "request-slots")
    assert v.slots == (SlotId(9),) and f"holds working slot {r1.working_slot} but the device mirror names slot 9" in v.reason


def test_ping_pong_length_follows_overlap() -> None:
    """Re-checked whenever the request's record changes: r1 at steps 1-3, r2 at step 5."""
    violations = run(clean_history(), engine(overlap=False), names=["request-slots"])
    assert [(v.step, v.rids) for v in violations] == [(1, (R1,)), (2, (R1,)), (3, (R1,)), (5, (R2,))]
    assert all("has 2 ping-pong entries, expected 1 (overlap=False)" in v.reason for v in violations)


# --- invariant 3: provenance --------------------------------------------------------------


def test_donated_slot_never_written_since_allocation() -> None:
    history = clean_history()
    events = [e for e in history[0][1] if not isinstance(e, TrackPlanEvent)]  # the prefill write is lost
    v = only(run(edit(history, 0, events=events), names=["provenance"]), "provenance")
    assert (v.step, v.slots, v.nodes, v.rids) == (2, (2,), (1,), (R1,))
    assert "never written since its allocation at step 1" in v.reason


def test_donated_slot_last_written_for_another_request() -> None:
    history = clean_history()
    events = history[2][1] + [TrackPlanEvent(step=Step(3), rid=R2, slot=SlotId(3), position=128)]
    v = only(run(edit(history, 2, events=events), names=["provenance"]), "provenance")
    assert (v.step, v.slots, v.rids) == (4, (3,), (R1,))
    assert "last written for request r2" in v.reason


def test_provenance_without_allocation_in_history_uses_previous_claims() -> None:
    history = clean_history()[2:]  # the history starts after slot 3 was allocated and planned
    assert run(history, names=["provenance"]) == []
    state = history[0][0]
    state.slots[SlotId(3)] = [SlotClaim(SlotId(3), "unaccounted")]
    events = [e for e in history[0][1] if not isinstance(e, TrackPlanEvent)]
    v = only(run(edit(history, 0, state=state, events=events), names=["provenance"]), "provenance")
    assert v.step == 4 and "not a ping-pong slot" in v.reason


# --- invariant 4: state depth -------------------------------------------------------------


def test_key_floored_below_the_tracked_state() -> None:
    """#38815: the state was tracked at 128 but the key (and node) end at 96."""
    history = clean_history()[:4]
    state = history[3][0]
    state.nodes[NodeId(2)] = replace(state.nodes[NodeId(2)], key_len=32, kv_runs=[(50_064, 32)])
    events = list(history[3][1])
    events[0] = replace(events[0], seqlen=96)
    violations = run(edit(history, 3, state=state, events=events), names=["state-depth"])
    v = only(violations, "state-depth")
    assert (v.step, v.slots, v.nodes, v.rids) == (4, (3,), (2,), (R1,))
    assert "position 128" in v.reason and "depth 96" in v.reason


def test_lookahead_off_by_one_plan() -> None:
    """#29792: the boundary was credited one step off: the write was planned for 129."""
    history = clean_history()
    events = [replace(history[2][1][0], position=129)]
    v = only(run(edit(history, 2, events=events), names=["state-depth"]), "state-depth")
    assert v.step == 4 and "position 129" in v.reason


def test_node_end_moves_under_its_state() -> None:
    history = clean_history()
    state = history[2][0]
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], key_len=63, kv_runs=[(50_000, 63)])
    violations = run(edit(history, 2, state=state), names=["state-depth"])
    assert [(v.step, v.nodes) for v in violations] == [(3, (1,)), (4, (1,))]  # moved, and moved back


# --- invariant 5: ping-pong safety --------------------------------------------------------


def test_plan_into_a_donated_slot() -> None:
    history = clean_history()
    events = [TrackPlanEvent(step=Step(3), rid=R1, slot=SlotId(2), position=128)]  # stale ping-pong index
    violations = run(edit(history, 2, events=events), names=["ping-pong-safety"])
    v = only(violations, "ping-pong-safety")
    assert (v.step, v.slots, v.nodes, v.rids) == (3, (2,), (1,), (R1,))
    assert "node 1 has cached since step 2" in v.reason


# --- invariant 6: locks -------------------------------------------------------------------


def test_missing_lock_for_live_request() -> None:
    history = clean_history()
    state = history[4][0]
    for node_id in (1, 2):
        state.nodes[NodeId(node_id)] = replace(state.nodes[NodeId(node_id)], full_lock=0, mamba_lock=0)
    v = only(run(edit(history, 4, state=state), names=["locks"]), "locks")
    assert (v.step, v.nodes, v.rids) == (5, (2,), (R2,))
    assert "a lock is missing" in v.reason


def test_mamba_lock_without_full_lock_and_double_release() -> None:
    history = clean_history()
    state = history[4][0]
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], mamba_lock=1)
    assert "mamba lock 1 but only 0" in only(run(edit(history, 4, state=state), names=["locks"]), "locks").reason
    state = clean_history()[4][0]
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], full_lock=0)
    v = only(run(edit(history, 4, state=state), names=["locks"]), "locks")
    assert v.nodes == (1,) and "children hold 1" in v.reason


def test_rust_core_records_carry_no_lock_or_lru_detail() -> None:
    """sglang's Rust tree core shows no lock refs (-1) and no LRU membership: nothing to flag."""
    history = []
    for state, events in clean_history():
        state.nodes = {i: replace(n, full_lock=-1, mamba_lock=-1, in_mamba_lru=False) for i, n in state.nodes.items()}
        history.append((state, events))
    assert run(history) == []


# --- invariant 7: copy-on-write source ----------------------------------------------------


def test_cow_source_is_not_the_matched_nodes_state() -> None:
    history = clean_history()
    events = list(history[4][1])
    events[1] = replace(events[1], cow_source=SlotId(2))  # node 1's state, not node 2's
    v = only(run(edit(history, 4, events=events), names=["cow-source"]), "cow-source")
    assert (v.step, v.slots, v.nodes, v.rids) == (5, (2,), (2,), (R2,))
    assert "it is node 1's" in v.reason


def test_cow_source_evicted_before_admission() -> None:
    history = clean_history()
    events = list(history[4][1])
    events.insert(3, EvictEvent(step=Step(5), nodes=[NodeId(2)], slots=[SlotId(3)], tokens=64))
    v = only(run(edit(history, 4, events=events), names=["cow-source"]), "cow-source")
    assert v.step == 5 and v.slots == (3,) and "evicted after the match" in v.reason
    rejected = [e for e in events if not (isinstance(e, RequestEvent) and e.what == "admit")]
    assert run(edit(history, 4, events=rejected), names=["cow-source"]) == []  # sglang dropped the copy


def test_pending_cow_source_equal_to_working_slot() -> None:
    history = clean_history()
    state = history[4][0]
    state.requests[R2] = replace(state.requests[R2], cow_source=state.requests[R2].working_slot)
    v = only(run(edit(history, 4, state=state), names=["cow-source"]), "cow-source")
    assert "onto itself" in v.reason


def test_pending_cow_source_on_an_unlocked_node() -> None:
    history = clean_history()
    state = history[4][0]
    state.requests[R2] = replace(state.requests[R2], cow_source=SlotId(2))
    assert run(edit(history, 4, state=state), names=["cow-source"]) == []  # node 1 is on r2's locked path
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], full_lock=0)
    v = only(run(edit(history, 4, state=state), names=["cow-source"]), "cow-source")
    assert (v.step, v.nodes, v.slots, v.rids) == (5, (1,), (2,), (R2,)) and "no lock protects" in v.reason


# --- invariant 8: tree shape --------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (dict(parent=NodeId(77)), "has parent 77, which is not in the tree"),
        (dict(depth=10), "starts at depth 10 but its parent 1 ends at 64"),
        (dict(in_mamba_lru=False), "holds slot 3 but is not in the mamba LRU"),
        (dict(kv_evicted=True, kv_runs=[]), "holds slot 3 but its KV was evicted"),
        (dict(kv_runs=[(50_064, 10)]), "has 10 KV tokens for a key of 64"),
    ],
)
def test_tree_shape(changes: dict[str, object], expected: str) -> None:
    history = clean_history()
    state = history[3][0]
    state.nodes[NodeId(2)] = replace(state.nodes[NodeId(2)], **changes)
    violations = run(edit(history, 3, state=state), names=["tree-shape"])
    assert [v.step for v in violations] == [4] and violations[0].nodes[0] == 2
    assert violations[0].reason == f"node 2 {expected}"


def test_ghost_node_and_cycle() -> None:
    history = clean_history()
    state = history[3][0]
    state.nodes[NodeId(3)] = record(3, 2, 128, 0, kv=[])
    v = only(run(edit(history, 3, state=state), names=["tree-shape"]), "tree-shape")
    assert v.nodes == (3, 2) and "empty key" in v.reason
    state = clean_history()[3][0]
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], parent=NodeId(2))  # 1 -> 2 -> 1
    violations = run(edit(history, 3, state=state), names=["tree-shape"])
    assert any("starts at depth 0 but its parent 2 ends at 128" in v.reason for v in violations)


def test_split_parent_gets_no_state() -> None:
    history = clean_history()
    state = history[2][0]
    state.nodes[NodeId(5)] = replace(record(5, 0, 0, 32, slot=7, kv=[(50_000, 32)]), full_lock=1)
    state.nodes[NodeId(1)] = replace(state.nodes[NodeId(1)], parent=NodeId(5), depth=32, key_len=32, kv_runs=[(50_032, 32)])
    violations = run(edit(history, 2, state=state), names=["tree-shape"])
    assert any(v.nodes == (5, 1) and "split off above node 1" in v.reason for v in violations)


# --- invariant 9: KV pages ----------------------------------------------------------------


def test_request_row_differs_from_its_path() -> None:
    history = clean_history()
    state = history[4][0]
    runs = state.requests[R2].kv_runs
    state.requests[R2] = replace(state.requests[R2], kv_runs=[(runs[0][0], 100), (60_000, 28), *runs[1:]])
    v = only(run(edit(history, 4, state=state), names=["kv-pages"]), "kv-pages")
    assert (v.step, v.rids, v.nodes) == (5, (R2,), (2,)) and "at position 100" in v.reason


def test_tree_kv_freed_while_node_holds_it() -> None:
    history = clean_history()
    state = history[6][0]  # node 1 is unchanged at step 7: only the newly freed tokens reach it
    state.kv = replace(state.kv, free_runs=state.kv.free_runs + [(50_010, 5)])
    v = only(run(edit(history, 6, state=state), names=["kv-pages"]), "kv-pages")
    assert (v.step, v.nodes) == (7, (1,)) and v.reason == "KV token 50010 of node 1 was freed while the node still holds it"


def test_page_misaligned_node() -> None:
    history = clean_history()
    state = history[3][0]
    state.kv = replace(state.kv, page_size=16)
    state.nodes[NodeId(2)] = replace(state.nodes[NodeId(2)], kv_runs=[(50_065, 63), (50_064, 1)])
    v = only(run(edit(history, 3, state=state), names=["kv-pages"]), "kv-pages")
    assert (v.step, v.nodes) == (4, (2,)) and "position 64 at KV index 50065" in v.reason


def test_run_helpers_match_token_sets() -> None:
    """The interval arithmetic kv-pages relies on, against plain token sets."""
    rng = random.Random(7)
    tokens = factory.tokens_of
    for _ in range(2000):
        a = [(rng.randrange(200), rng.randrange(15)) for _ in range(rng.randrange(8))]
        b = [(rng.randrange(200), rng.randrange(15)) for _ in range(rng.randrange(8))]
        ia, ib = intervals(a), intervals(b)
        common = tokens(a) & tokens(b)
        hit = first_overlap(a, as_runs(ib))
        assert (hit in common) if common else hit is None
        assert tokens(as_runs(subtract(ia, ib))) == tokens(a) - tokens(b)
        n = rng.randrange(40)
        assert [t for s, length in truncate(a, n) for t in range(s, s + length)] == [t for s, length in a for t in range(s, s + length)][:n]


# --- T1: content --------------------------------------------------------------------------


def test_cached_state_overwritten_while_owned() -> None:
    history = clean_history()
    state = history[2][0]
    state.contents[SlotId(2)] = SlotContent(SlotId(2), -2, 0, False, Step(3))  # int64 from the kernels
    v = only(run(edit(history, 2, state=state), names=["content-immutable"]), "content-immutable")
    assert (v.step, v.slots, v.nodes) == (3, (2,), (1,))
    assert "00000000000000a1 at step 2, fffffffffffffffe at step 3" in v.reason


def test_nan_and_zero_fingerprints() -> None:
    history = clean_history()
    state = history[3][0]
    state.contents[SlotId(3)] = SlotContent(SlotId(3), 0, 0, True, Step(4))
    state.contents[SlotId(2)] = SlotContent(SlotId(2), 0xA1, 3, False, Step(4))
    violations = run(edit(history, 3, state=state), names=["content-immutable"])
    reasons = sorted(v.reason for v in violations)
    assert [v.step for v in violations] == [4, 4]
    assert reasons == ["slot 2 (tree) holds 3 NaN/Inf values", "slot 3 cached at node 2 is all zeros: it was never written"]


def test_snapshot_alone_reports_its_nan_fingerprints() -> None:
    state = clean_history()[3][0]
    state.contents[SlotId(2)] = SlotContent(SlotId(2), 0xA1, 1, False, Step(3))
    v = only(check_step(StepView.first(state)), "content-immutable")
    assert (v.step, v.slots) == (4, (2,)) and "1 NaN/Inf" in v.reason


def test_fingerprint_before_ownership_is_no_baseline() -> None:
    """A slot re-cached by another node after eviction may change content: no violation."""
    history = clean_history()
    w_state = history[6][0]
    w_state.contents[SlotId(3)] = SlotContent(SlotId(3), 0xC3, 0, False, Step(7))
    assert run(edit(history, 6, state=w_state), names=["content-immutable"]) == []


def with_cow(history: list[Step_], *, copied: int, cleared_zero: bool) -> list[Step_]:
    """Step 5's copy-on-write of slot 3 into r2's working slot, as the engine fingerprints it
    right after the copy ran (`copied`: the destination's fingerprint), plus a cleared slot."""
    state, events = history[4]
    (match,) = [e for e in events if isinstance(e, MatchEvent)]
    working = state.requests[R2].working_slot
    cow = CowEvent(
        step=Step(5), sources=[match.cow_source], destinations=[working], source_fingerprints=[0xB2],
        destination_fingerprints=[copied], cleared=[SlotId(9)], cleared_zero=[cleared_zero],
    )  # fmt: skip
    return edit(history, 4, events=[*events, cow])


def test_copy_on_write_equal_to_its_source_is_clean() -> None:
    assert run(with_cow(clean_history(), copied=0xB2, cleared_zero=True)) == []


def test_copy_on_write_that_differs_from_its_source() -> None:
    history = with_cow(clean_history(), copied=0xB3, cleared_zero=True)
    v = only(run(history), "cow-copy")
    working = history[4][0].requests[R2].working_slot
    assert v.step == 5 and v.slots == (working, SlotId(3))
    assert f"working slot {working} differs from its copy-on-write source 3" in v.reason


def test_cleared_slot_that_is_not_zero() -> None:
    v = only(run(with_cow(clean_history(), copied=0xB2, cleared_zero=False)), "cow-copy")
    assert v.slots == (SlotId(9),) and "cleared" in v.reason


# --- registry, API, scale -----------------------------------------------------------------


def test_registry_describes_every_check() -> None:
    assert len(CHECKS) == 18 and "T2" in NOT_CHECKED and "T3" not in NOT_CHECKED
    for name, spec in CHECKS.items():
        assert spec.name == name and spec.description and spec.targets and spec.needs and spec.checked and spec.blind_to
    with pytest.raises(UnknownCheck):
        run_checks([], ["no-such-check"])


def test_violation_round_trips_through_json() -> None:
    v = Violation(check="slot-partition", step=Step(3), reason="r", nodes=(NodeId(1),), slots=(SlotId(2),), rids=(R1,))
    assert msgspec.json.decode(msgspec.json.encode(v), type=Violation) == v
    assert json.loads(msgspec.json.encode(v))["slots"] == [2]


def test_gap_forgets_the_past() -> None:
    """After a gap, event checks must not reason from facts of before the gap."""
    history = clean_history()
    first = StepView.first(history[0][0], history[0][1], engine())
    after_gap = first.next(history[3][0], history[3][1], contiguous=False)
    assert after_gap.previous is None and not after_gap.ledger.known
    assert check_step(after_gap) == []


def _chain(depth: int) -> CacheState:
    """A chain of `depth` nodes of 4 tokens, the last one holding slot 1, one request at its end."""
    w = World(size=4)
    for i in range(1, depth + 1):
        w.nodes[NodeId(i)] = record(i, i - 1, 4 * (i - 1), 4, kv=[(4 * (i - 1), 4)])
    w.nodes[NodeId(depth)] = replace(w.nodes[NodeId(depth)], mamba_slot=SlotId(1), in_mamba_lru=True)
    w.alloc(1)
    working, pp = w.alloc(1), w.alloc(2)
    w.put(
        R1,
        private=[(4 * depth, 8)],
        working_slot=working[0],
        ping_pong=pp,
        ping_pong_empty=[False, False],
        next_track_idx=0,
        last_track_idx=1,
        last_node=NodeId(depth),
        cache_protected_len=4 * depth,
        allocated_len=4 * depth + 8,
    )
    return w.state(1)


def test_deep_chain_without_recursion() -> None:
    state = _chain(100_000)
    start = time.perf_counter()
    violations = check_step(StepView.first(state, (), engine()))
    elapsed = time.perf_counter() - start
    assert violations == []
    assert elapsed < 2.0, f"{elapsed:.2f} s"
    # a cycle deep in the chain is still found, without recursing
    state.nodes[NodeId(50_000)] = replace(state.nodes[NodeId(50_000)], parent=NodeId(99_999))
    assert any(v.nodes[0] == 50_000 for v in check_step(StepView.first(state, (), engine()), ["tree-shape"]))


def test_timing_on_10k_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    """Not a benchmark: a printed order of magnitude for a full check and an unchanged step."""
    state = _chain(10_000)
    start = time.perf_counter()
    first = run_checks([StepView.first(state, (), engine())])
    full = time.perf_counter() - start
    view = StepView.first(state, (), engine()).next(state)
    start = time.perf_counter()
    again = check_step(view)
    step = time.perf_counter() - start
    assert first == again == []
    with capsys.disabled():
        print(f"\nrun_checks, 10k-node state: first view {full * 1000:.1f} ms, unchanged next step {step * 1000:.1f} ms")


# --- what the forward ran: write-ran, write-target, cow-ran -------------------------------


def _writes(history: list[Step_], index: int, **changes: object) -> list[Step_]:
    """The history with the TrackWriteEvent of step `index` changed (or dropped: changes=None)."""
    state, events = history[index]
    kept = []
    for event in events:
        if isinstance(event, TrackWriteEvent):
            if changes.get("drop"):
                continue
            event = replace(event, **changes)
        kept.append(event)
    return edit(history, index, events=kept)


def test_a_donated_slot_no_forward_wrote_is_reported_at_its_donation() -> None:
    """#30862 / #24613: the plan exists, the copy never ran, the slot is donated anyway."""
    at_forward, at_donation = run(_writes(clean_history(), 0, drop=True), names=["write-ran"])
    assert (at_forward.step, at_forward.slots, at_forward.rids) == (1, (2,), (R1,))
    assert (
        "r1's extend forward ran (its deferred copies did) but no track copy wrote its state at position 64 into slot 2"
        in at_forward.reason
    )
    assert (at_donation.step, at_donation.slots, at_donation.nodes, at_donation.rids) == (2, (2,), (1,), (R1,))
    assert "was never written by a forward since its allocation at step 1 (planned at step 1, position 64)" in at_donation.reason


def test_a_write_for_another_position_or_request_is_reported() -> None:
    v = only(run(_writes(clean_history(), 0, positions=[48]), names=["write-ran"]), "write-ran")
    assert "holds the state its forward wrote for position 48" in v.reason
    stray = _writes(clean_history(), 0, mask=[False])  # the copy wrote slot 2, but no row planned it
    at_forward, at_donation = run(stray, names=["write-ran"])
    assert at_forward.step == 1 and at_forward.reason.endswith("but its track copy was not told to track that row")
    assert at_donation.step == 2 and "last received a write no request of its batch planned" in at_donation.reason


def test_the_decode_write_went_to_the_padding_slot_instead() -> None:
    """#32555: the graph bound a stale buffer tail: the copy wrote slot 0, the planned slot 3
    stays unwritten and is donated at r1's finish."""
    history = _writes(clean_history(), 2, written=[SlotId(0)])
    at_forward, at_donation = run(history, names=["write-ran", "write-target"])
    assert (at_forward.check, at_forward.step, at_forward.slots) == ("write-ran", 3, (3,))
    assert at_forward.reason.endswith("into slot 3, but its track copy wrote 0")
    assert (at_donation.check, at_donation.step, at_donation.slots, at_donation.nodes) == ("write-ran", 4, (3,), (2,))


def test_decode_steps_replayed_from_cuda_graphs_are_not_judged() -> None:
    history = _writes(clean_history(), 2, drop=True)
    assert run(history, engine(track_writes="extend"), names=["write-ran"]) == []
    assert only(run(history, engine(track_writes="all"), names=["write-ran"]), "write-ran").step == 4  # no CowEvent: a decode step
    assert run(history, engine(track_writes=""), names=["write-ran"]) == []  # an engine that reports none


def test_a_write_into_a_cached_or_unplanned_slot_is_reported_at_its_step() -> None:
    """#34184: stale rows scattered a state into an earlier request's checkpoint slot."""
    history = _writes(clean_history(), 2, written=[SlotId(3), SlotId(2)])
    v = only(run(history, names=["write-target"]), "write-target")
    assert (v.step, v.slots, v.nodes) == (3, (2,), (1,))
    assert "wrote a state into slot 2, which node 1 has cached since step 2" in v.reason
    free = _writes(clean_history(), 2, written=[SlotId(3), SlotId(8)])
    v = only(run(free, names=["write-target"]), "write-target")
    assert v.slots == (8,) and "which no request of its batch planned (held by the free list)" in v.reason


def test_a_write_then_a_finish_donation_in_one_step_after_a_gap_is_not_judged() -> None:
    """r1's decode tracks slot 3 and r1 finishes in the same step, donating slot 3 to node 2
    (an MRC 0.5.15 demo); the step before went unobserved, so nothing says slot 3 was r1's."""
    history = clean_history()
    write = next(e for e in history[2][1] if isinstance(e, TrackWriteEvent))
    state, events = history[3]
    same_step = [replace(write, step=Step(4)), *events]
    assert run(edit(history, 3, events=same_step), names=["write-target"]) == []  # r1's at step 3
    after_gap = StepView.first(state, same_step, engine(track_writes="all"))
    assert check_write_target(after_gap) == []


def test_a_copy_on_write_that_never_ran_is_reported_at_the_step() -> None:
    """#24954: the deferred copy of r2's hit is not in its forward's copies."""
    history = clean_history()
    state, events = history[4]
    lost = [replace(e, sources=[], destinations=[]) if isinstance(e, CowEvent) else e for e in events]
    v = only(run(edit(history, 4, events=lost), names=["cow-ran"]), "cow-ran")
    assert (v.step, v.slots, v.rids, v.nodes) == (5, (3,), (R2,), (2,))
    assert "into its working slot 5, but its forward ran no such copy" in v.reason
    no_forward = [e for e in events if not isinstance(e, CowEvent)]  # its forward runs after the boundary
    assert run(edit(history, 4, events=no_forward), names=["cow-ran"]) == []
