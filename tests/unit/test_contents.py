"""ContentCapture (engine side of T1) on sglang 0.5.23's real mamba pool (CPU tensors): when a
tree slot is first fingerprinted, how soon an in-place change is seen, and what is dropped."""

from __future__ import annotations

from typing import Any

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import pytest  # noqa: E402
import torch  # noqa: E402

from mcinspect.schema import SlotId, Step  # noqa: E402
from mcinspect_engine_hooks.content_mirror import ContentMirror  # noqa: E402
from mcinspect_engine_hooks.contents import (  # noqa: E402
    DEFAULT_BUDGET,
    DEVICE_BUDGET_BYTES,
    RECHECK_EVERY,
    SETTLE_CHUNK,
    ContentCapture,
    default_budget,
    slot_prints,
)
from mcinspect_kernels.fingerprint import HostFold, fingerprint_slots  # noqa: E402

from cpu_cache import build_cache  # noqa: E402


def random_pool(seed: int, **sizes: int) -> tuple[Any, Any]:
    """A real cache (cpu_cache.build_cache) whose mamba states hold random values: (scheduler, its mamba_cache)."""
    scheduler = build_cache(**sizes)
    cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
    generator = torch.Generator().manual_seed(seed)
    for state in [*cache.conv, cache.temporal]:
        state.copy_(torch.randn(state.shape, generator=generator).to(state.dtype))
    return scheduler, cache


def test_fingerprints_follow_ownership_and_in_place_changes() -> None:
    scheduler, cache = random_pool(0)

    def truth(slot: int) -> int:
        return fingerprint_slots(list(cache.conv), cache.temporal, torch.tensor([slot])).fingerprint.item()

    contents = ContentCapture(scheduler)
    assert RECHECK_EVERY == 4  # the steps below are laid out for it
    # step 1: node 7 takes slot 3; its producing forward may still run: not read yet
    assert contents.capture(Step(1), {3: 7}) == ({}, [])
    # step 2: owned by the same node for a whole step: first fingerprint
    fresh, dropped = contents.capture(Step(2), {3: 7})
    first = fresh[SlotId(3)].fingerprint
    assert list(fresh) == [SlotId(3)] and first == truth(3) and dropped == []
    # step 3: the cached state is overwritten in place (the bug T1 catches); no new slot, no recheck yet
    cache.temporal[:, 3] += 1.0
    assert contents.capture(Step(3), {3: 7}) == ({}, [])
    # step 4: the recheck sees it
    fresh, _ = contents.capture(Step(4), {3: 7})
    assert fresh[SlotId(3)].fingerprint == truth(3) != first and fresh[SlotId(3)].step == 4
    # step 5: node 9 takes slot 5 (not stable yet); step 6: its first fingerprint, and only
    # its, with no compare (it has no bits kept): slot 3's are compared at the next recheck
    assert contents.capture(Step(5), {3: 7, 5: 9}) == ({}, [])
    compared: list[list[int]] = []
    unchanged = contents._mirror.unchanged
    contents._mirror.unchanged = lambda slots: compared.append(list(slots)) or unchanged(slots)
    fresh, _ = contents.capture(Step(6), {3: 7, 5: 9})
    assert list(fresh) == [SlotId(5)] and compared == []
    # step 7: slot 3 left the tree: its fingerprint describes nothing any more
    fresh, dropped = contents.capture(Step(7), {5: 9})
    assert fresh == {} and dropped == [SlotId(3)] and set(contents.current()) == {SlotId(5)}
    # a cleared slot cached again reads as all zeros (what T1 reports as never written)
    cache.temporal[:, 6] = 0
    for state in cache.conv:
        state[:, 6] = 0
    contents.capture(Step(8), {5: 9, 6: 11})
    assert compared == [[5]]  # a recheck step: every stable cached slot (6 is not stable yet)
    fresh, _ = contents.capture(Step(9), {5: 9, 6: 11})
    assert fresh[SlotId(6)].zero and not contents.current()[SlotId(5)].zero


def test_a_catch_ups_thousands_of_new_owners_settle_a_chunk_a_step() -> None:
    """After a catch-up every slot of the tree may change owner at once: the step after, each is
    stable, and moving them all into the round-robin in one step is O(tree) on the scheduler
    thread. They move SETTLE_CHUNK a step, and each is fingerprinted, exactly, all the same."""
    n = 3 * SETTLE_CHUNK
    scheduler, cache = random_pool(1, mamba_slots=n + 8)
    owners = {slot: 10_000 + slot for slot in range(1, n + 1)}
    contents = ContentCapture(scheduler)
    assert contents.capture(Step(1), owners, set(owners)) == ({}, [])  # a catch-up's last step: nothing stable yet
    seen: dict[SlotId, int] = {}
    step = 2
    while len(seen) < n:
        waiting = len(contents._settling)
        fresh, dropped = contents.capture(Step(step), owners, set())
        assert dropped == [] and waiting - len(contents._settling) <= SETTLE_CHUNK
        seen.update({slot: content.fingerprint for slot, content in fresh.items()})
        step += 1
        assert step < 200, "some stable slots were never fingerprinted"
    every = torch.tensor(sorted(seen))
    assert list(seen[SlotId(s)] for s in every.tolist()) == fingerprint_slots(list(cache.conv), cache.temporal, every).fingerprint.tolist()


def test_a_recheck_hashes_only_moved_bits_and_a_new_owner_gets_a_fingerprint_again() -> None:
    """Host pools keep the bits each fingerprint came from (content_mirror.py): a recheck skips
    the unmoved slots, yet sees a change a float compare would miss (0.0 -> -0.0), and a slot
    that left the tree and came back with the same bits is reported again under its new node."""
    scheduler, cache = random_pool(2)
    for state in [*cache.conv, cache.temporal]:
        state[:, 4] = 0.0
    contents = ContentCapture(scheduler)
    contents.capture(Step(1), {3: 7, 4: 8})
    fresh, _ = contents.capture(Step(2), {3: 7, 4: 8})
    assert set(fresh) == {SlotId(3), SlotId(4)} and fresh[SlotId(4)].zero
    cache.temporal[:, 4] = -0.0  # other bits, still all zero
    fresh, _ = contents.capture(Step(4), {3: 7, 4: 8})  # a recheck step
    expected = fingerprint_slots(list(cache.conv), cache.temporal, torch.tensor([4])).fingerprint.item()
    assert list(fresh) == [SlotId(4)] and fresh[SlotId(4)].fingerprint == expected and fresh[SlotId(4)].zero
    fresh, dropped = contents.capture(Step(5), {4: 8})
    assert fresh == {} and dropped == [SlotId(3)]
    contents.capture(Step(6), {3: 12, 4: 8})  # node 12 takes slot 3, bits unchanged
    fresh, _ = contents.capture(Step(7), {3: 12, 4: 8})
    assert list(fresh) == [SlotId(3)] and fresh[SlotId(3)].step == 7


@pytest.mark.parametrize("most_of_the_pool", [False, True])
def test_the_mirror_sees_one_bit_flipped_anywhere_in_a_slot(most_of_the_pool) -> None:
    """ContentMirror compares rows as the widest words that tile them (8 bytes on these rows):
    the lowest bit of a row's first or last element, in any tensor and layer, still counts,
    for its own slot only; flipped back, the bits are those of the fingerprint again. Both ways
    of comparing: a few slots gathered, or most of the pool compared in place."""
    _, cache = random_pool(3)
    tensors = [*cache.conv, cache.temporal]
    mirror = ContentMirror.of_pool(tensors)
    size = cache.temporal.shape[1]
    slots = list(range(1, size)) if most_of_the_pool else [2, 3, 5]
    assert (2 * len(slots) >= size) == most_of_the_pool
    mirror.store(slots)
    expected = [slot != 3 for slot in slots]
    assert mirror.unchanged(slots) == [True] * len(slots)
    for t in tensors:
        words = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
        for layer in (0, t.shape[0] - 1):
            for element in (0, -1):
                words[layer, 3].view(-1)[element] ^= 1
                assert mirror.unchanged(slots) == expected, (t.dtype, layer, element)
                words[layer, 3].view(-1)[element] ^= 1
                assert mirror.unchanged(slots) == [True] * len(slots)
    mirror.forget([3])
    assert mirror.unchanged(slots) == expected


def test_a_slot_that_left_the_tree_is_not_read_until_it_is_cached_again() -> None:
    # The capture says which slots changed owner; a slot that left the tree is among them, and
    # contents keep it (unsettled, then settling) without ever reading it under no owner.
    contents = ContentCapture(build_cache())
    assert contents._fold is not None
    read: list[list[int]] = []
    fold = contents._fold
    contents._fold = lambda slots: read.append(list(slots)) or fold(slots)
    contents.capture(Step(1), {3: 7, 4: 8}, {3, 4})
    fresh, _ = contents.capture(Step(2), {3: 7, 4: 8}, set())
    assert set(fresh) == {SlotId(3), SlotId(4)}
    fresh, dropped = contents.capture(Step(3), {3: 7}, {4})  # slot 4 left the tree
    assert fresh == {} and dropped == [SlotId(4)]
    read.clear()
    for step in range(4, 4 + 2 * RECHECK_EVERY):  # two rechecks
        assert contents.capture(Step(step), {3: 7}, set()) == ({}, [])
    assert read == []
    contents.capture(Step(20), {3: 7, 4: 9}, {4})  # cached again, under node 9
    fresh, _ = contents.capture(Step(21), {3: 7, 4: 9}, set())
    assert list(fresh) == [SlotId(4)] and read == [[4]]


def test_off_the_host_a_fingerprint_call_reads_about_a_fixed_number_of_bytes() -> None:
    """Host pools keep the slot count; elsewhere the budget is DEVICE_BUDGET_BYTES of state
    (a GPU call's cost is the bytes it reads), at least one slot however big a slot is."""
    host = [torch.zeros(2, 11, 64, 3, dtype=torch.bfloat16), torch.zeros(2, 11, 4, 8, 8)]
    assert default_budget(host) == DEFAULT_BUDGET
    # a slot: 2 layers x (64 x 3 bf16 + 4 x 8 x 8 fp32) = 768 + 2048 = 2816 bytes
    small = [torch.empty(2, 11, 64, 3, dtype=torch.bfloat16, device="meta"), torch.empty(2, 11, 4, 8, 8, device="meta")]
    assert default_budget(small) == (512 << 20) // 2816 == DEVICE_BUDGET_BYTES // 2816
    # a slot of 48 x (16 x 128 x 128 fp32) = 48 MiB: 10 of them
    large = [torch.empty(48, 3, 4096, 3, dtype=torch.bfloat16, device="meta"), torch.empty(48, 3, 16, 128, 128, device="meta")]
    assert default_budget(large) == 10
    huge = [torch.empty(64, 3, 8, dtype=torch.bfloat16, device="meta"), torch.empty(64, 3, 64, 256, 256, device="meta")]
    assert default_budget(huge) == 1


def test_the_device_path_gives_the_host_folds_values_as_lists() -> None:
    _, cache = random_pool(1)
    cache.temporal[:, 2].zero_()
    cache.temporal[0, 3].view(-1)[0] = float("nan")
    slots = [1, 2, 3]
    printed = slot_prints(list(cache.conv), cache.temporal, slots)
    want = HostFold(list(cache.conv) + [cache.temporal])(slots)
    assert printed == want
    assert [type(v) for v in printed.all_zero] == [bool] * 3 and printed.nonfinite[2] == 1
