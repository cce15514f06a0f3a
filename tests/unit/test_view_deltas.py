"""A view's changes read from the delta that made its state (StepView.delta: O(the change)), and
the KV holders index handed from view to view (kv_holders.py), against the two states compared
and a pass over every node, on a random chain of steps: nodes changed, added and removed, their
tokens allocated and freed, requests and slots moved, and some steps freeing a token that an
unchanged node still holds (the bug kv-pages reports)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from mcinspect.check_driver import CheckDriver  # noqa: E402
from mcinspect.checks import StepView, check_step  # noqa: E402
from mcinspect.schema import (  # noqa: E402
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    KvEdit,
    KvState,
    NodeId,
    NodeRecord,
    RequestGrowth,
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

import factory  # noqa: E402
from factory import runs_of  # noqa: E402
from record_states import make_request  # noqa: E402

SIZE = 60_000
FREED_WHILE_HELD = "was freed while the node still holds it"


def tokens_of(runs: list[tuple[int, int]]) -> set[int]:
    return {start + i for start, length in runs for i in range(length)}


class World:
    """Nodes with KV tokens drawn from one pool, and the free list that follows."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.free = set(range(SIZE))
        self.next_id = 1
        self.state = CacheState(
            step=Step(0), nodes={}, slots=factory.free_slots(*range(1, 41)), requests={},
            kv=KvState(page_size=1, size=SIZE, free_runs=[]),
        )  # fmt: skip
        for _ in range(150):
            node = self.new_node()
            self.state.nodes[node.id] = node
        self.state.kv = KvState(page_size=1, size=SIZE, free_runs=runs_of(self.free))

    def take(self, count: int) -> set[int]:
        """`count` free tokens, scattered (as a fragmented pool hands them out)."""
        taken = set(self.rng.sample(sorted(self.free), count))
        self.free -= taken
        return taken

    def new_node(self) -> NodeRecord:
        node_id, self.next_id = self.next_id, self.next_id + 1
        tokens = self.take(self.rng.randint(1, 40))
        parent = self.rng.choice(sorted(self.state.nodes)) if node_id > 1 else -1
        return factory.node(node_id, parent, kv_runs=runs_of(tokens), key_len=len(tokens))

    def step(self, seq: int) -> tuple[Delta, set[int]]:
        """A random delta, and the tokens it put on the free list."""
        rng, nodes = self.rng, self.state.nodes
        free_before = set(self.free)
        ids = [i for i in nodes if i != 1]
        upserts: list[NodeRecord] = []
        removed: list[NodeId] = []
        for node_id in rng.sample(ids, 6):
            node = nodes[node_id]
            kind = rng.random()
            if kind < 0.3:  # evicted: its tokens go back
                removed.append(node_id)
                self.free |= tokens_of(node.kv_runs)
            elif kind < 0.6:  # its KV moved: new tokens, the old ones freed
                fresh = self.take(rng.randint(1, 30))
                self.free |= tokens_of(node.kv_runs)
                upserts.append(msgspec.structs.replace(node, kv_runs=runs_of(fresh), key_len=len(fresh)))
            elif kind < 0.7:  # another field only
                upserts.append(msgspec.structs.replace(node, hit_count=node.hit_count + 1))
            elif kind < 0.8:  # moved under another node (a split puts a new parent above it)
                upserts.append(msgspec.structs.replace(node, parent=rng.choice([i for i in ids if i < node_id] or [NodeId(1)])))
            else:  # sent again unchanged (an equal record is no change)
                upserts.append(msgspec.structs.replace(node))
        upserts += [self.new_node() for _ in range(rng.randint(0, 4))]
        touched = {n.id for n in upserts} | set(removed)
        if rng.random() < 0.4:  # the bug: a token of a node left alone goes on the free list
            victim = nodes[rng.choice([i for i in ids if i not in touched])]
            held = sorted(tokens_of(victim.kv_runs) - self.free)
            if held:
                self.free.add(rng.choice(held))
        slot = SlotId(rng.randint(1, 40))
        claims = {slot: [SlotClaim(slot=slot, kind=rng.choice(["free", "tree"]), node=NodeId(rng.choice(ids)))]}
        # Fingerprints taken at this boundary, and now and then one sent again as it was (an
        # equal record is no change) or re-stamped earlier (the verifier's overlay).
        contents = {}
        for _ in range(rng.randint(0, 3)):
            at = SlotId(rng.randint(1, 40))
            known = self.state.contents.get(at)
            kind = rng.random()
            if known is not None and kind < 0.2:
                contents[at] = msgspec.structs.replace(known)
            else:
                stamp = Step(seq if kind < 0.8 else max(seq - 3, 0))
                contents[at] = SlotContent(slot=at, fingerprint=rng.getrandbits(63), nonfinite=0, zero=False, step=stamp)
        requests = self.state.requests
        rid = Rid(f"r{rng.randrange(6)}")
        upsert_requests = [] if rid in requests and rng.random() < 0.5 else [make_request(rid, 1, rng.randint(1, 40), (-1, -1))]
        grown = [
            RequestGrowth(r.rid, r.output_len + 1, r.committed_len + 1, r.allocated_len + 1, [])
            for r in requests.values()
            if r.rid != rid and rng.random() < 0.5
        ]
        delta = Delta(
            schema_version=SCHEMA_VERSION, seq=Seq(seq), step=Step(seq), upsert_nodes=upserts, removed_nodes=removed, slots=claims,
            upsert_requests=upsert_requests, removed_requests=[], grown_requests=grown, kv=None, events=[], counters=Counters(published=seq),
            contents=contents,
            kv_edit=KvEdit(removed=runs_of(free_before - self.free), added=runs_of(self.free - free_before)),
        )  # fmt: skip
        apply_delta(self.state, delta)
        assert self.state.kv.free_runs == runs_of(self.free)
        return delta, self.free - free_before


def test_a_views_changes_from_its_delta_and_the_freed_tokens_through_the_carried_index() -> None:
    rng = random.Random(3)
    world = World(rng)
    with_delta = without = StepView.first(copy_state(world.state))
    caught = 0
    for seq in range(1, 121):
        delta, freed = world.step(seq)
        with_delta = with_delta.next(copy_state(world.state), delta=delta)
        without = without.next(copy_state(world.state))
        assert with_delta.delta is delta and without.delta is None
        # The same changes either way (as sets: a delta lists them in its own order).
        assert sorted(n.id for n in with_delta.changed_nodes) == sorted(n.id for n in without.changed_nodes), seq
        assert sorted(n.id for n in with_delta.removed_nodes) == sorted(n.id for n in without.removed_nodes), seq
        assert sorted(r.rid for r in with_delta.changed_requests) == sorted(r.rid for r in without.changed_requests), seq
        assert sorted(with_delta.changed_slots) == sorted(without.changed_slots), seq
        assert sorted(with_delta.changed_contents) == sorted(without.changed_contents), seq
        stamped = sorted(slot for slot, content in world.state.contents.items() if content.step == seq)
        assert sorted(with_delta.fingerprinted) == sorted(without.fingerprinted) == stamped, seq
        assert with_delta.tree_owners == without.tree_owners == StepView.first(world.state).tree_owners, seq
        # Every check finds the same either way (the random world breaks several invariants).
        assert sorted(map(str, check_step(with_delta))) == sorted(map(str, check_step(without))), seq
        # The children index each chain hands on, against the tree as it is.
        below: dict[NodeId, list[NodeId]] = {}
        for node in world.state.nodes.values():
            below.setdefault(node.parent, []).append(node.id)
        for view in (with_delta, without):
            assert {p: sorted(n.id for n in view.children.of(p)) for p in below} == {p: sorted(ids) for p, ids in below.items()}, seq
        # Every node the step left alone that holds a token the step freed, and no other (a
        # token leaked earlier may have gone to a second node since, and be freed by it now).
        changed = {node.id for node in without.changed_nodes}
        expected = sorted(n.id for n in world.state.nodes.values() if n.id not in changed and tokens_of(n.kv_runs) & freed)
        for view in (with_delta, without):
            found = [v.nodes[0] for v in check_step(view, ["kv-pages"]) if FREED_WHILE_HELD in v.reason]
            assert found == expected, (seq, found, expected)
        caught += bool(expected)
    assert caught > 20
    assert "kv_holders" in with_delta.__dict__  # handed along the chain, not rebuilt
    assert with_delta.free_runs is with_delta.state.kv.free_runs  # edited runs taken as they are


def test_the_driver_tells_the_checks_a_delta_only_when_it_follows_the_last_frame() -> None:
    """A Delta whose seq follows the last frame's made this state of the last: the checks read
    the changes from it. After a seq jump (deltas missed) or a snapshot they compare states."""
    world = World(random.Random(5))
    driver = CheckDriver(names=["kv-pages"])
    snapshot = Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(0), state=copy_state(world.state), counters=Counters())
    driver.step(copy_state(world.state), (), counters=Counters(), restart=True, frame=snapshot)
    told = []
    for seq in (1, 2, 4, 5):
        delta, _ = world.step(seq)
        driver.step(copy_state(world.state), (), counters=delta.counters, restart=False, frame=delta)
        told.append(driver._view is not None and driver._view.delta is delta)  # what its checks were given
    assert told == [True, True, False, True]


def test_a_free_list_out_of_order_is_put_in_order_before_it_is_bisected() -> None:
    """A whole free list (a snapshot file's: nothing says it is sorted) is sorted and merged for
    the checks; a node holding a token in it is still found."""
    state = factory.state(nodes=[factory.node(1, -1, kv_runs=[]), factory.node(2, 1, kv_runs=[(500, 4)])])
    state.kv = KvState(page_size=1, size=4096, free_runs=[(900, 10), (0, 100), (502, 1), (100, 5)])
    view = StepView.first(state)
    assert view.free_runs == [(0, 105), (502, 1), (900, 10)]
    assert [v.nodes for v in check_step(view, ["kv-pages"])] == [(2,)]
