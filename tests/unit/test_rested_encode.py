"""Big snapshots and deltas are encoded in pieces with rests (the scheduler thread gets the GIL
between them) and decode to the same message as a plain encode."""

from __future__ import annotations

from typing import cast

import msgspec
import pytest

from mcinspect.schema import Counters, Delta, History, Seq, SlotContent, SlotId, Snapshot, Step
from mcinspect_engine_hooks import rested_encode
from mcinspect_engine_hooks.cow_map import SHARD_SIZE, CowMap
from mcinspect_engine_hooks.published_state import PublishedState, SnapshotParts
from mcinspect_engine_hooks.rested_encode import CHUNK, encode_rested

from factory import delta, free_slots, node, snapshot, state


def test_a_big_snapshot_decodes_the_same_and_rests_between_pieces() -> None:
    cache = state(nodes=[node(i, parent=i - 1) for i in range(CHUNK * 3 + 7)], slots=free_slots(*range(1, CHUNK * 2 + 4)))
    cache.contents = {SlotId(s): SlotContent(slot=SlotId(s), fingerprint=s, nonfinite=0, zero=False, step=Step(1)) for s in range(1, 40)}
    message = snapshot(9, cache)
    rests: list[float] = []
    encoded = encode_rested(msgspec.msgpack.Encoder(), message, rests.append)
    assert msgspec.msgpack.decode(encoded, type=Snapshot) == message
    assert len(rests) == 4 + 3  # the nodes in 4 pieces, the slots in 3; the small fields at once


def test_snapshot_parts_encode_from_their_frozen_shards_as_the_snapshot_they_stand_for() -> None:
    """The maps span shards, with a gap of whole shards between ids; an empty frozen map is an
    empty map; the contents are a plain dict (small: at once)."""
    ids = [*range(1, SHARD_SIZE + 9), *range(3 * SHARD_SIZE, 3 * SHARD_SIZE + 5)]
    cache = state(4, nodes=[node(i, parent=i - 1) for i in ids], slots=free_slots(*ids))
    cache.contents = {SlotId(3): SlotContent(slot=SlotId(3), fingerprint=3, nonfinite=0, zero=False, step=Step(2))}
    expected = snapshot(9, cache)
    nodes, slots = CowMap(cache.nodes), CowMap(cache.slots)
    published = PublishedState(cache.step, nodes.freeze(), slots.freeze(), cache.requests, cache.kv)
    parts = SnapshotParts(seq=Seq(9), published=published, contents=cache.contents, counters=expected.counters)
    rests: list[float] = []
    encoded = encode_rested(msgspec.msgpack.Encoder(), parts, rests.append)
    assert msgspec.msgpack.decode(encoded, type=Snapshot) == expected
    pieces = -(-len(ids) // CHUNK)
    assert len(rests) == 2 * pieces
    empty = PublishedState(cache.step, CowMap().freeze(), CowMap().freeze(), {}, cache.kv)
    encoded = encode_rested(msgspec.msgpack.Encoder(), SnapshotParts(Seq(1), empty, {}, Counters()), rests.append)
    assert msgspec.msgpack.decode(encoded, type=Snapshot).state == state(4)


def test_a_big_delta_decodes_the_same_and_a_small_one_is_one_piece() -> None:
    nodes = [node(i, parent=0) for i in range(CHUNK + 1)]
    big = Delta(
        schema_version=1, seq=Seq(3), step=Step(3), upsert_nodes=nodes, removed_nodes=[], slots=free_slots(*range(1, CHUNK + 6)),
        upsert_requests=[], removed_requests=[], kv=None, events=[], counters=Counters(),
    )  # fmt: skip
    rests: list[float] = []
    encoded = encode_rested(msgspec.msgpack.Encoder(), big, rests.append)
    assert msgspec.msgpack.decode(encoded, type=Delta) == big
    assert len(rests) == 2 + 2
    small = msgspec.structs.replace(big, upsert_nodes=nodes[:5], slots={})
    rests.clear()
    assert encode_rested(msgspec.msgpack.Encoder(), small, rests.append) == msgspec.msgpack.encode(small) and not rests


def test_a_big_message_is_assembled_a_bounded_copy_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # No single call copies the whole message: the pieces and the skeleton go into the output
    # COPY_BYTES at a time, with a rest after each (the 100k bench's join and outer encode held
    # the GIL 10-30 ms each).
    monkeypatch.setattr(rested_encode, "COPY_BYTES", 4096)
    message = snapshot(9, state(nodes=[node(i, parent=i - 1) for i in range(CHUNK * 4)]))
    rests: list[float] = []
    encoded = encode_rested(msgspec.msgpack.Encoder(), message, rests.append)
    assert msgspec.msgpack.decode(encoded, type=Snapshot) == message
    assert len(rests) >= 4 + len(encoded) // 4096 - 1  # the pieces' rests, then one after each full copy


def test_a_history_holding_a_big_delta_is_copied_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rested_encode, "COPY_BYTES", 4096)
    deltas = [delta(seq, nodes=[node(i, parent=0) for i in range(200 * seq)]) for seq in (1, 2)]
    raws = cast("list[Delta]", [msgspec.Raw(msgspec.msgpack.encode(d)) for d in deltas])
    history = History(schema_version=1, deltas=raws, oldest_seq=Seq(1))
    rests: list[float] = []
    encoded = encode_rested(msgspec.msgpack.Encoder(), history, rests.append)
    assert msgspec.msgpack.decode(encoded, type=History).deltas == deltas
    assert len(rests) >= len(encoded) // 4096 - 1 > 2  # a rest after each full copy (the last may be short)


def test_a_history_of_decoded_deltas_is_encoded_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rested_encode, "COPY_BYTES", 16)
    history = History(schema_version=1, deltas=[delta(1, nodes=[node(i, parent=0) for i in range(20)])], oldest_seq=Seq(1))
    encoded = encode_rested(msgspec.msgpack.Encoder(), history, [].append)
    assert encoded == msgspec.msgpack.encode(history)
