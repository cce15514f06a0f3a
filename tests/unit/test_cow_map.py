"""cow_map.py: a snapshot of the baseline is taken in O(shards) and never changes afterwards;
the map copies only the shards it changes; the copy for another thread rests between shards."""

from __future__ import annotations

from mcinspect_engine_hooks.cow_map import SHARD_SIZE, CowMap


def test_a_frozen_view_keeps_the_entries_of_its_freeze() -> None:
    entries = {key: f"v{key}" for key in range(3 * SHARD_SIZE)}
    cow: CowMap[int, str] = CowMap(entries)
    frozen = cow.freeze()
    cow[5] = "changed"
    del cow[SHARD_SIZE + 1]
    cow[10 * SHARD_SIZE] = "new"
    assert frozen.to_dict(rest=lambda seconds: None) == entries and len(frozen) == len(entries)
    assert frozen.get(5) == "v5" and frozen.get(10 * SHARD_SIZE) is None
    assert cow.to_dict() == {**{k: v for k, v in entries.items() if k != SHARD_SIZE + 1}, 5: "changed", 10 * SHARD_SIZE: "new"}
    assert len(cow) == len(entries) and 5 in cow and SHARD_SIZE + 1 not in cow


def test_a_change_after_a_freeze_copies_only_its_own_shard() -> None:
    cow: CowMap[int, int] = CowMap((key, key) for key in range(4 * SHARD_SIZE))
    frozen = cow.freeze()
    cow[3] = -3
    cow[4] = -4  # the same shard: copied once, then changed in place
    shared = [index for index, shard in frozen._shards.items() if shard is cow._shards[index]]
    assert shared == [1, 2, 3]
    assert frozen._shards[0][3] == 3 and cow[3] == -3


def test_another_threads_copy_rests_after_each_shard() -> None:
    cow: CowMap[int, int] = CowMap((key, key) for key in range(5 * SHARD_SIZE + 7))
    rests: list[float] = []
    copy = cow.freeze().to_dict(rest=rests.append)
    assert copy == cow.to_dict() and len(rests) == 6 and all(seconds >= 0 for seconds in rests)


def test_pop_keys_in_deletes_the_same_keys_either_way() -> None:
    evens = range(0, 4 * SHARD_SIZE, 2)
    cow: CowMap[int, int] = CowMap((key, key) for key in evens)
    before = cow.freeze()
    few = {1, 2, 3, 4, 9 * SHARD_SIZE}
    assert sorted(cow.pop_keys_in(few)) == [2, 4]
    # Shards 1 and 2 whole, and the first key of shard 3.
    many = set(range(SHARD_SIZE, 3 * SHARD_SIZE + 1))
    assert sorted(cow.pop_keys_in(many)) == [k for k in sorted(many) if k % 2 == 0]
    left = [k for k in evens if k not in {2, 4} and k not in many]
    assert cow.keys() == left and len(cow) == len(left) and all(cow[k] == k for k in left)
    assert cow.pop_keys_in(many) == [] and len(cow) == len(left)
    assert before.to_dict(rest=lambda _: None) == {k: k for k in evens}  # the frozen state is untouched
