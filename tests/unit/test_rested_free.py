"""A dropped big snapshot is freed in pieces with rests when the caller held its last
reference, and left whole when someone else still holds it; of the inspector's SnapshotParts,
only the shards the live maps no longer share."""

from __future__ import annotations

import copy

from mcinspect.schema import Counters, KvState, NodeId, Seq, Snapshot, Step
from mcinspect_engine_hooks.cow_map import SHARD_SIZE, CowMap
from mcinspect_engine_hooks.published_state import PublishedState, SnapshotParts
from mcinspect_engine_hooks.rested_encode import CHUNK
from mcinspect_engine_hooks.rested_free import free_rested

from factory import free_slots, node, snapshot, state


def _big() -> object:
    return snapshot(3, state(nodes=[node(i, parent=i - 1) for i in range(CHUNK * 3 + 1)], slots=free_slots(*range(1, CHUNK * 2))))


def test_a_snapshot_only_the_caller_holds_is_emptied_in_pieces() -> None:
    message = _big()
    nodes, slots = message.state.nodes, message.state.slots  # type: ignore[attr-defined]
    watched = [nodes, slots]  # the dicts, to look at them afterwards (the state keeps one more ref)
    count = len(nodes)
    doomed = [message]
    del message, nodes, slots
    rests: list[float] = []
    # The dicts are held here too, so they are someone else's: nothing is emptied.
    assert free_rested(doomed, rests.append) == 0 and not rests
    assert len(watched[0]) == count

    message = _big()
    doomed = [message]
    del message
    assert free_rested(doomed, rests.append) >= CHUNK * 5
    assert len(rests) == 4 + 2  # the nodes in 4 pieces, the slots in 2


def test_a_snapshot_held_elsewhere_is_left_whole() -> None:
    message = _big()
    kept = copy.copy(message)  # a shallow copy shares the state
    count = len(kept.state.nodes)
    doomed = [message]
    rests: list[float] = []
    assert free_rested(doomed, rests.append) == 0 and not rests
    doomed = [message]
    del message
    assert free_rested(doomed, rests.append) == 0  # the state is still `kept`'s
    assert len(kept.state.nodes) == count > CHUNK * 3 and not rests


def test_snapshot_parts_free_only_the_shards_the_live_maps_stopped_sharing() -> None:
    live = CowMap({NodeId(i): node(i) for i in range(3 * SHARD_SIZE)})
    frozen = live.freeze()
    live[NodeId(SHARD_SIZE)] = node(SHARD_SIZE, key_len=3)  # copies the second shard first
    live.pop_keys_in(set(range(2 * SHARD_SIZE, 3 * SHARD_SIZE)))  # drops the third
    empty = CowMap().freeze()
    published = PublishedState(Step(1), frozen, empty, {}, KvState(page_size=1, size=1, free_runs=[]))
    doomed: list[Snapshot | SnapshotParts] = [SnapshotParts(Seq(1), published, {}, Counters())]
    del frozen, published
    rests: list[float] = []
    assert free_rested(doomed, rests.append) == 2 * SHARD_SIZE  # the first shard is still the live map's
    assert len(rests) == 2 * -(-SHARD_SIZE // CHUNK)
    assert len(live) == 2 * SHARD_SIZE and live[NodeId(SHARD_SIZE)].key_len == 3 and live[NodeId(5)] == node(5)
