"""Check tp-agree: the recordings of two TP ranks, beside each other as `record` writes them
(rank_files.py), compared step by step; what may differ between ranks (last_access) does not count."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
from random_steps import World

from mcinspect.check_runner import check_file
from mcinspect.checks.cross_rank import PairAgreement, RankKeys, disagreements, reference_ranks
from mcinspect.rank_agreement import RankAgreement
from mcinspect.rank_files import rank_path, rank_paths
from mcinspect.recording import RecordingWriter
from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    KvState,
    NodeId,
    Seq,
    SlotClaim,
    SlotId,
    Snapshot,
    Step,
    apply_delta,
    copy_state,
)

from factory import engine_info, free_slots, node, state


def _snapshot() -> Snapshot:
    state = CacheState(
        step=Step(10),
        nodes={NodeId(0): node(0, -1, 0, 0), NodeId(1): node(1, 0, 0, slot=1)},
        slots={
            SlotId(s): [SlotClaim(slot=SlotId(s), kind="tree", node=NodeId(1))] if s == 1 else [SlotClaim(slot=SlotId(s), kind="free")]
            for s in (1, 2, 3)
        },
        requests={},
        kv=KvState(page_size=16, size=4096, free_runs=[(16, 4080)]),
    )
    return Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(0), state=state, counters=Counters())


def _insert(slot: int, last_access: float = 0.0) -> Delta:
    """Step 11: node 2 enters the tree under node 1 with `slot`."""
    return Delta(
        schema_version=SCHEMA_VERSION, seq=Seq(1), step=Step(11),
        upsert_nodes=[msgspec.structs.replace(node(2, 1, 16, slot=slot), last_access=last_access)], removed_nodes=[],
        slots={SlotId(slot): [SlotClaim(slot=SlotId(slot), kind="tree", node=NodeId(2))]},
        upsert_requests=[], removed_requests=[], kv=None, events=[], counters=Counters(),
    )  # fmt: skip


def _write(path: str, *frames: Snapshot | Delta) -> None:
    with RecordingWriter(Path(path), None, compress=False) as writer:
        for frame in frames:
            writer.write(frame)


def test_rank_files_sit_beside_rank_zeros(tmp_path: Path) -> None:
    path = str(tmp_path / "run.mcrec")
    assert rank_path(path, 0) == path and rank_path(path, 1) == str(tmp_path / "run.rank1.mcrec")
    _write(path, _snapshot())
    assert rank_paths(path) == [path]
    _write(rank_path(path, 1), _snapshot())
    assert rank_paths(path) == [path, rank_path(path, 1)]


def test_ranks_that_agree_but_for_their_clocks_are_clean(tmp_path: Path) -> None:
    path = str(tmp_path / "run.mcrec")
    _write(path, _snapshot(), _insert(2, last_access=1.0))
    _write(rank_path(path, 1), _snapshot(), _insert(2, last_access=2.5))
    assert list(check_file(path, ["tp-agree"])) == []


def test_a_rank_that_keeps_a_state_in_another_slot_is_named_at_the_step(tmp_path: Path) -> None:
    path = str(tmp_path / "run.mcrec")
    _write(path, _snapshot(), _insert(2))
    _write(rank_path(path, 1), _snapshot(), _insert(3))
    found = list(check_file(path, ["tp-agree"]))
    assert found and {v.check for v in found} == {"tp-agree"} and {v.step for v in found} == {11}
    assert {SlotId(2), SlotId(3)} <= {s for v in found for s in v.slots}
    node_two = [v for v in found if v.nodes == (NodeId(2),) and not v.slots]
    assert node_two and "mamba_slot 3 there, 2 on rank 0" in node_two[0].reason
    assert list(check_file(path, ["slot-partition"])) == []  # each rank alone is consistent


def test_a_stream_far_ahead_of_the_other_is_still_compared_at_every_step() -> None:
    """Live ranks in a burst (one session drained before the other): each rank's states arrive
    in step order, however far apart, and every common step is compared once."""
    steps = range(1, 101)
    ours = [state(s, slots=free_slots(1, 2)) for s in steps]
    theirs = [state(s, slots=free_slots(1, 2) if s < 40 else free_slots(1)) for s in steps]
    agreement = RankAgreement([None, None])
    found = [v for s in ours for v in agreement.add(0, s)] + [v for s in theirs for v in agreement.add(1, s)]
    assert sorted({v.step for v in found}) == list(range(40, 101))
    again = RankAgreement([None, None])
    found = [v for s in theirs for v in again.add(1, s)] + [v for s in ours for v in again.add(0, s)]
    assert sorted({v.step for v in found}) == list(range(40, 101))


def test_attention_data_parallel_groups_are_not_compared_with_each_other() -> None:
    """tp 2 with attn-dp 2: each rank schedules its own requests; tp 4 with attn-dp 2: ranks
    0 and 1 form one group, 2 and 3 the other."""
    two = [msgspec.structs.replace(engine_info(), tp_rank=r, dp_rank=r, attn_dp_size=2, tp_size=2) for r in range(2)]
    assert reference_ranks(two) == [None, None]
    four = [msgspec.structs.replace(engine_info(), tp_rank=r, dp_rank=r // 2, attn_dp_size=2, tp_size=4) for r in range(4)]
    assert reference_ranks(four) == [None, 0, None, 2]
    agreement = RankAgreement(two)
    assert agreement.add(0, state(5, slots=free_slots(1))) == [] and agreement.add(1, state(5, slots=free_slots(2))) == []


def _diverged(delta: Delta, ours: CacheState, theirs: CacheState, rng: random.Random) -> Delta:
    """Rank 1's delta of the step that took rank 0 to `ours`: its own clock throughout, and now and
    then a record of its own (a node in another slot, a node it alone evicts, a slot claimed
    otherwise, a request in another working slot), or one put back as rank 0 holds it."""
    upserts = [msgspec.structs.replace(n, last_access=n.last_access + 0.5) for n in delta.upsert_nodes]
    removed, slots, requests = list(delta.removed_nodes), dict(delta.slots), list(delta.upsert_requests)
    kind = rng.random()
    shared = sorted(set(ours.nodes) & set(theirs.nodes) - {n.id for n in upserts} - set(removed) - {NodeId(1)})
    if kind < 0.08 and shared:
        victim = theirs.nodes[rng.choice(shared)]
        upserts.append(msgspec.structs.replace(victim, mamba_slot=SlotId(victim.mamba_slot + 7)))
    elif kind < 0.12 and shared:
        removed.append(rng.choice(shared))
    elif kind < 0.18:
        slot = SlotId(rng.randint(1, 40))
        slots[slot] = [SlotClaim(slot=slot, kind="tree", node=NodeId(999))]
    elif kind < 0.22 and requests:
        requests[0] = msgspec.structs.replace(requests[0], working_slot=SlotId(requests[0].working_slot + 1))
    elif kind < 0.3:  # healed: one record of rank 0's sent again
        nodes = [n for n in ours.nodes if theirs.nodes.get(n) is None or theirs.nodes[n].mamba_slot != ours.nodes[n].mamba_slot]
        claims = [slot for slot in ours.slots if theirs.slots.get(slot) != ours.slots[slot]]
        if nodes:
            upserts.append(ours.nodes[rng.choice(nodes)])
        elif claims:
            slot = rng.choice(claims)
            slots[slot] = ours.slots[slot]
    return msgspec.structs.replace(delta, upsert_nodes=upserts, removed_nodes=removed, slots=slots, upsert_requests=requests)


def test_a_pair_compared_by_what_changed_finds_what_a_whole_comparison_finds() -> None:
    """`PairAgreement` told only the records both ranks' deltas changed (and `RankAgreement` fed
    the frames) report at every step exactly what comparing every record reports, on two ranks
    fed the same random steps where rank 1 now and then diverges and later heals, its clock
    differing throughout, and now and then a frame whose delta is not known (compared whole)."""
    rng = random.Random(11)
    world = World(rng)
    theirs = copy_state(world.state)
    pair, agreement = PairAgreement(1, 0), RankAgreement([None, None])
    first = Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(0), state=world.state, counters=Counters())
    agreement.add(0, copy_state(world.state), first)
    agreement.add(1, copy_state(theirs), first)
    outcomes = {"agree": 0, "differ": 0, "many": 0, "unknown": 0}
    for seq in range(1, 201):
        delta, _ = world.step(seq)
        theirs_delta = _diverged(delta, world.state, theirs, rng)
        apply_delta(theirs, theirs_delta)
        known = rng.random() > 0.05
        changed = None
        if known:
            changed = RankKeys.of_delta(delta)
            changed.update(RankKeys.of_delta(theirs_delta))
        whole = disagreements(Step(seq), world.state, theirs, 1, 0)
        assert pair.compare(Step(seq), world.state, theirs, changed) == whole, seq
        agreement.add(0, copy_state(world.state), delta if known else None)
        assert agreement.add(1, copy_state(theirs), theirs_delta) == whole, seq
        outcomes["unknown" if not known else "many" if len(whole) >= 8 else "differ" if whole else "agree"] += 1
    assert min(outcomes.values()) >= 5, outcomes
