"""A view's changes read from the delta that made its state (StepView.delta: O(the change)), and
the KV holders index handed from view to view (kv_holders.py), against the two states compared
and a pass over every node, on a random chain of steps: nodes changed, added and removed, their
tokens allocated and freed, requests and slots moved, and some steps freeing a token that an
unchanged node still holds (the bug kv-pages reports)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from random_steps import World  # noqa: E402

from mcinspect.check_driver import CheckDriver  # noqa: E402
from mcinspect.checks import StepView, check_step  # noqa: E402
from mcinspect.schema import (  # noqa: E402
    SCHEMA_VERSION,
    Counters,
    KvState,
    NodeId,
    Seq,
    Snapshot,
    copy_state,
)

import factory  # noqa: E402
from factory import tokens_of  # noqa: E402

FREED_WHILE_HELD = "was freed while the node still holds it"


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
