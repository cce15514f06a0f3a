"""diff_states reports what the deltas between two states did: deltas are built, applied, and
the diff is compared with the changes the deltas were built to make."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec

from mcinspect.diff import Owner, StateDiff, diff_json, diff_recording, diff_states, format_diff
from mcinspect.recording import RecordingReader, RecordingWriter
from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    KvState,
    NodeId,
    NodeRecord,
    RequestRecord,
    Rid,
    Seq,
    SlotClaim,
    SlotContent,
    SlotId,
    Snapshot,
    Step,
    apply_delta,
    copy_state,
)

import factory


def node(i: int, parent: int, depth: int, key_len: int, slot: int = -1, lock: int = 0, tombstone: bool = False) -> NodeRecord:
    return factory.node(i, parent, depth, key_len, slot=slot, lock=lock, in_full_lru=not lock, tombstone=tombstone)


def request(rid: str) -> RequestRecord:
    return RequestRecord(
        rid=Rid(rid),
        state="running",
        row=0,
        prompt_len=8,
        output_len=0,
        prefix_len=0,
        cache_protected_len=0,
        committed_len=0,
        allocated_len=8,
        last_node=NodeId(-1),
        working_slot=SlotId(-1),
        ping_pong=[],
        ping_pong_empty=[],
        next_track_idx=0,
        last_track_idx=-1,
        last_track_seqlen=-1,
        prev_track_seqlen=-1,
        cow_source=SlotId(-1),
        needs_clear=False,
        kv_runs=[],
    )


def tree(slot: int, node_id: int) -> list[SlotClaim]:
    return [SlotClaim(slot=SlotId(slot), kind="tree", node=NodeId(node_id))]


def free(slot: int) -> list[SlotClaim]:
    return [SlotClaim(slot=SlotId(slot), kind="free")]


def content(slot: int, fingerprint: int, step: int) -> SlotContent:
    return SlotContent(slot=SlotId(slot), fingerprint=fingerprint, nonfinite=0, zero=False, step=Step(step))


def base() -> CacheState:
    """root 0 -> 1 (slot 1) -> 2 (32 tokens, slot 2); requests r0."""
    return CacheState(
        step=Step(10),
        nodes={NodeId(0): node(0, -1, 0, 0), NodeId(1): node(1, 0, 0, 16, slot=1), NodeId(2): node(2, 1, 16, 32, slot=2)},
        slots={SlotId(1): tree(1, 1), SlotId(2): tree(2, 2), SlotId(3): free(3), SlotId(4): free(4)},
        requests={Rid("r0"): request("r0")},
        kv=KvState(page_size=16, size=1024, free_runs=[(48, 976)]),
        contents={SlotId(1): content(1, 0xAAAA, 9), SlotId(2): content(2, 0xBBBB, 9)},
    )


def make_delta(
    seq: int,
    step: int,
    *,
    upsert_nodes: list[NodeRecord] | None = None,
    removed_nodes: list[NodeId] | None = None,
    slots: dict[SlotId, list[SlotClaim]] | None = None,
    upsert_requests: list[RequestRecord] | None = None,
    removed_requests: list[Rid] | None = None,
    contents: dict[SlotId, SlotContent] | None = None,
) -> Delta:
    return Delta(
        schema_version=SCHEMA_VERSION,
        seq=Seq(seq),
        step=Step(step),
        upsert_nodes=upsert_nodes or [],
        removed_nodes=removed_nodes or [],
        slots=slots or {},
        upsert_requests=upsert_requests or [],
        removed_requests=removed_requests or [],
        kv=None,
        events=[],
        counters=Counters(),
        contents=contents or {},
    )


def scenario() -> list[Delta]:
    """Step 11: split node 2 at 16 tokens (new parent 5), insert 3 (slot 3) and 4 (slot 4) under 1,
    lock 1, refingerprint slot 1, admit r1. Step 12: evict 4 (slot 4 freed), tombstone 3 (slot 3
    freed), unlock nothing, finish r0."""
    return [
        make_delta(
            1,
            11,
            upsert_nodes=[
                node(5, 1, 16, 16),
                node(2, 5, 32, 16, slot=2),
                node(3, 1, 16, 8, slot=3),
                node(4, 1, 16, 4, slot=4),
                node(1, 0, 0, 16, slot=1, lock=1),
            ],
            slots={SlotId(3): tree(3, 3), SlotId(4): tree(4, 4)},
            upsert_requests=[request("r1")],
            contents={SlotId(1): content(1, 0xCCCC, 11), SlotId(3): content(3, 0xDDDD, 11)},
        ),
        make_delta(
            2,
            12,
            upsert_nodes=[node(3, 1, 16, 8, tombstone=True)],
            removed_nodes=[NodeId(4)],
            slots={SlotId(3): free(3), SlotId(4): free(4)},
            removed_requests=[Rid("r0")],
        ),
    ]


def applied(state: CacheState, deltas: list[Delta]) -> CacheState:
    out = copy_state(state)
    for delta in deltas:
        apply_delta(out, delta)
    return out


def test_diff_names_what_the_deltas_did() -> None:
    a = base()
    b = applied(a, scenario())
    diff = diff_states(a, b)
    assert (diff.from_step, diff.to_step) == (10, 12)
    assert diff.nodes_added == [3, 5]  # 4 came and went between the two states
    assert diff.nodes_evicted == []
    assert [(s.node, s.old_parent, s.new_parent, s.old_key_len, s.new_key_len) for s in diff.nodes_split] == [(2, 1, 5, 32, 16)]
    assert diff.nodes_tombstoned == []  # 3 was not in the first state
    assert diff.slot_owner_changes == []  # slots 3 and 4 were claimed, then freed again
    assert [(c.slot, c.before, c.after) for c in diff.fingerprint_changes] == [(1, 0xAAAA, 0xCCCC), (3, None, 0xDDDD)]
    assert [(c.node, c.full_lock, c.mamba_lock) for c in diff.lock_changes] == [(1, (0, 1), (0, 1))]
    assert diff.requests_added == ["r1"] and diff.requests_removed == ["r0"]

    middle = applied(a, scenario()[:1])
    second = diff_states(middle, b)
    assert second.nodes_evicted == [4] and second.nodes_tombstoned == [3] and not second.nodes_split
    assert [(c.slot, [str(o) for o in c.before], [str(o) for o in c.after]) for c in second.slot_owner_changes] == [
        (3, ["tree #3"], ["free"]),
        (4, ["tree #4"], ["free"]),
    ]
    assert not second.lock_changes and not second.fingerprint_changes


def test_unchanged_states_and_claim_details_are_not_owner_changes() -> None:
    a = base()
    detail = make_delta(1, 11, slots={SlotId(1): [SlotClaim(slot=SlotId(1), kind="tree", node=NodeId(1), seqlen=16)]})
    b = applied(a, [detail])
    diff = diff_states(a, b)
    assert diff.empty and format_diff(diff) == "no changes from step 10 to step 11"


def test_random_deltas_match_the_diff() -> None:
    """Random inserts, evictions, slot moves and lock flips; the expected diff is tracked from
    the deltas themselves, not from the states."""
    rng = random.Random(7)
    a = base()
    state = copy_state(a)
    next_id = 10
    deltas = []
    for seq in range(1, 30):
        upserts, removed, slots = [], [], {}
        leaves = [n for n in state.nodes if n != 0 and not any(m.parent == n for m in state.nodes.values())]
        if rng.random() < 0.6 or not leaves:
            parent = rng.choice(list(state.nodes))
            upserts.append(node(next_id, parent, state.nodes[parent].depth + state.nodes[parent].key_len, 16, slot=next_id))
            slots[SlotId(next_id)] = tree(next_id, next_id)
            next_id += 1
        else:
            victim = rng.choice(leaves)
            removed.append(victim)
            slots[SlotId(state.nodes[victim].mamba_slot)] = free(state.nodes[victim].mamba_slot)
        flip = rng.choice([n for n in state.nodes if n not in removed])
        record = state.nodes[flip]
        upserts.append(node(flip, record.parent, record.depth, record.key_len, record.mamba_slot, lock=1 - record.full_lock))
        delta = make_delta(seq, 10 + seq, upsert_nodes=upserts, removed_nodes=removed, slots=slots)
        deltas.append(delta)
        apply_delta(state, delta)

    ever_upserted = {n.id for d in deltas for n in d.upsert_nodes}
    ever_removed = {n for d in deltas for n in d.removed_nodes}
    final_ids = (set(a.nodes) | ever_upserted) - ever_removed  # ids are never reused after removal
    flips: dict[int, int] = {}
    for d in deltas:
        for n in d.upsert_nodes:
            if n.id in a.nodes:
                flips[n.id] = flips.get(n.id, 0) + 1
    last_claims = {slot: claims for d in deltas for slot, claims in d.slots.items()}

    diff = diff_states(a, state)
    assert set(state.nodes) == final_ids
    assert diff.nodes_added == sorted(final_ids - set(a.nodes))
    assert diff.nodes_evicted == sorted(set(a.nodes) - final_ids)
    assert {c.node for c in diff.lock_changes} == {n for n, count in flips.items() if count % 2 and n in final_ids}
    assert {c.slot for c in diff.slot_owner_changes} == {
        s for s, claims in last_claims.items() if sorted(map(Owner.of, claims)) != sorted(map(Owner.of, a.slots.get(s, [])))
    }
    assert not diff.nodes_split and not diff.fingerprint_changes


def test_text_and_json() -> None:
    diff = diff_states(base(), applied(base(), scenario()))
    text = format_diff(diff)
    assert text.splitlines()[0] == "changes from step 10 to step 12:"
    assert "  nodes added (2): #3 #5" in text and "#2: key 32 -> 16, parent #1 -> #5" in text
    assert "slot 1: 000000000000aaaa -> 000000000000cccc" in text and "#1: full 0 -> 1, mamba 0 -> 1" in text
    assert msgspec.json.decode(diff_json(diff), type=StateDiff) == diff


def test_diff_between_two_steps_of_a_recording(tmp_path: Path) -> None:
    path = tmp_path / "r.mcirec"
    a = base()
    with RecordingWriter(path, None, compress=False) as writer:
        writer.write(Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(0), state=a, counters=Counters()))
        for delta in scenario():
            writer.write(delta)
    reader = RecordingReader(path)
    assert diff_recording(reader, Step(10), Step(12)) == diff_states(a, applied(a, scenario()))
    assert diff_recording(reader, Step(11), Step(12)) == diff_states(applied(a, scenario()[:1]), applied(a, scenario()))
