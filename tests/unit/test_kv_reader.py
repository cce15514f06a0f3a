"""KvReader on sglang 0.5.23's real paged KV allocator (CPU): a decode step that takes no page
rebinds `free_pages` to a view of the same pages, which is no change; an alloc or a free is."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import

import random  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from mcinspect.run_edits import edit_runs  # noqa: E402
from mcinspect.schema import from_runs  # noqa: E402
from mcinspect_engine_hooks import pools_0523  # noqa: E402
from mcinspect_engine_hooks.pools_0523 import KvReader  # noqa: E402

from cpu_cache import build_cache  # noqa: E402


def _free_tokens(reader: KvReader) -> list[int]:
    return from_runs(reader.read().free_runs)


def test_a_rebound_view_of_the_same_pages_is_no_change_and_an_alloc_or_free_is() -> None:
    allocator = build_cache(page_size=16, kv_size=256).token_to_kv_pool_allocator
    reader = KvReader(allocator)
    before = _free_tokens(reader)
    assert not reader.changed()

    allocator.free_pages = allocator.free_pages[0:]  # what alloc_decode does when no row needs a page
    assert not reader.changed()

    taken = allocator.alloc(32)  # two pages
    assert reader.changed()
    after_alloc = _free_tokens(reader)
    assert set(before) - set(after_alloc) == set(taken.tolist())
    assert not reader.changed()

    allocator.free(taken)
    assert reader.changed()
    assert sorted(_free_tokens(reader)) == sorted(before)


def _allocator(page_size: int, need_sort: bool, size: int = 4096) -> Any:
    """sglang's real token (page 1) or paged allocator, no KV pool behind it (not touched)."""
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator

    if page_size == 1:
        return TokenToKVPoolAllocator(size, torch.bfloat16, "cpu", None, need_sort)
    return PagedTokenToKVPoolAllocator(size, page_size, torch.bfloat16, "cpu", None, need_sort)


@pytest.mark.parametrize("page_size, need_sort", [(1, False), (1, True), (4, False), (4, True)])
def test_the_runs_edited_by_each_steps_allocs_and_frees_equal_a_whole_read(
    page_size: int, need_sort: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step allocs and frees through the real allocator (frees in scattered order, some in a
    free group; with `need_sort`, allocs that run the free list short make it merge and sort
    the freed pages): the runs the reader edits equal a fresh reader's whole read at every
    step, and only the first read and those after a merge read the list whole. Each edited
    read's change, applied as a client applies a Delta's KvEdit to the state before it, gives
    the same runs; a whole read has no edit to send."""
    monkeypatch.setattr(pools_0523, "WHOLE_READ_EDITS", 1 << 30)  # every change edited, however large
    allocator = _allocator(page_size, need_sort)
    merges = 0
    merge = allocator.merge_and_sort_free

    def counted() -> None:
        nonlocal merges
        released = getattr(allocator, "release_pages", None)
        merges += (released is not None and len(released) > 0) or getattr(allocator, "num_staged_pages", 0) > 0
        merge()

    allocator.merge_and_sort_free = counted
    reader = KvReader(allocator)
    state = reader.read()
    assert reader.edit_since(None) is None
    rng = random.Random(page_size * 2 + need_sort)
    held: list[torch.Tensor] = []
    reads = edits = 0
    for step in range(300):
        for _ in range(rng.randint(0, 3)):
            taken = allocator.alloc(rng.randint(1, 40 if step % 50 else 400) * page_size)
            if taken is not None:
                held += list(taken.reshape(-1, page_size))
        rng.shuffle(held)
        cut = rng.randint(0, len(held) // 3)
        freed, held = held[:cut], held[cut:]
        if step % 4 == 0:
            allocator.free_group_begin()
        for pages in freed:
            allocator.free(pages)
        if step % 4 == 0:
            allocator.free_group_end()
        if reader.changed():
            reads += 1
            whole_reads, before, state = reader.whole_reads, state, reader.read()
            assert state == KvReader(allocator).read(), step
            edit = reader.edit_since(before)
            assert (edit is None) == (reader.whole_reads > whole_reads), step
            if edit is not None:
                edits += 1
                assert edit_runs(before.free_runs, edit.removed, edit.added) == state.free_runs, step
                assert reader.edit_since(KvReader(allocator).read()) is None  # an edit of `before` alone
    assert reads > 200 and reader.whole_reads <= 1 + merges, (reads, reader.whole_reads, merges)
    assert edits == reads - (reader.whole_reads - 1)
    assert merges > 0 if need_sort else reader.whole_reads == 1


def test_a_steps_change_is_what_it_took_and_what_it_gave_back() -> None:
    """Not the whole list taken and given back (which the edits would follow too, at the cost
    of a whole read): the front the allocs took, the pages the frees appended."""
    import numpy as np

    from mcinspect_engine_hooks.kv_free_edits import list_change

    allocator = _allocator(1, need_sort=False)
    first = allocator.alloc(100)
    before = allocator.free_pages.numpy()
    taken = allocator.alloc(3)
    allocator.free(first[10:12])
    removed, added = list_change(before, allocator.free_pages.numpy())
    assert removed.tolist() == taken.tolist() and added.tolist() == first[10:12].tolist()
    assert len(np.intersect1d(removed, added)) == 0


def test_an_allocs_slice_is_found_by_its_address_and_a_copy_is_not() -> None:
    """An alloc leaves the front of the held list as a slice of its memory: found by address,
    the same change the compare finds. A copy of the same pages (fresh memory: the old list is
    held, so none of it can lie in its memory) is left to the compare."""
    from mcinspect_engine_hooks.kv_free_edits import list_change

    allocator = _allocator(1, need_sort=False)
    old = allocator.free_pages
    allocator.alloc(5)
    new = allocator.free_pages
    by_address = pools_0523._front_taken(old, new)
    assert by_address is not None
    compared = list_change(old.numpy(), new.numpy())
    assert compared is not None
    assert [part.tolist() for part in by_address] == [part.tolist() for part in compared] == [old[:5].tolist(), []]
    assert pools_0523._front_taken(old, new.clone()) is None
    assert pools_0523._front_taken(old, torch.cat((old[:2], new))) is None  # pages put back before it


def test_the_self_check_compares_the_edited_runs_with_the_list_read_whole() -> None:
    """Runs edited wrong (one run moved a token up, the count kept: nothing else notices) fail
    the self-check at the next step that edits them."""
    import msgspec

    from mcinspect.schema import Step
    from mcinspect_engine_hooks.capture import Capture
    from mcinspect_engine_hooks.events import EventSink
    from mcinspect_engine_hooks.self_check import SelfCheck

    scheduler = build_cache(page_size=1, kv_size=256)
    allocator = scheduler.token_to_kv_pool_allocator
    capture = Capture(scheduler, EventSink())
    capture.full_state(Step(0))
    check = SelfCheck()
    taken = allocator.alloc(5)
    assert capture.step(Step(1)) is not None
    check.after_step(capture, scheduler, Step(1))
    assert check.steps == 1 and check.failures == 0, check.first_failure
    reader = capture._kv_reader
    (start, length), *rest = reader._state.free_runs
    reader._state = msgspec.structs.replace(reader._state, free_runs=[(start + 1, length), *rest])
    allocator.free(taken[:2])
    assert capture.step(Step(2)) is not None
    check.after_step(capture, scheduler, Step(2))
    assert check.failures == 1 and "read whole" in check.first_failure, check.first_failure


def test_a_change_of_many_ranges_is_read_whole() -> None:
    """Past WHOLE_READ_EDITS ranges (and a twentieth of the runs) a whole read is cheaper than
    the edits (after a stretch nobody watched: 100k ranges were 0.9 s of edits)."""
    allocator = _allocator(1, need_sort=False)
    reader = KvReader(allocator)
    reader.read()
    taken = allocator.alloc(2 * pools_0523.WHOLE_READ_EDITS + 2)
    for token in taken[::2]:  # every other token: one range each
        allocator.free(token.reshape(1))
    assert reader.read() == KvReader(allocator).read() and reader.whole_reads == 2
    allocator.free(taken[1:2])
    assert reader.read() == KvReader(allocator).read() and reader.whole_reads == 2


def test_a_read_over_steps_leaves_the_publishing_step_a_short_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long change (what a catch-up's many steps pile up) read whole over steps, of the lists
    as they were at its first part, while the allocator goes on changing: the read that follows
    edits from there (no whole read in it) and equals a whole read."""
    monkeypatch.setattr(pools_0523, "SPREAD_RUNS", 50)
    allocator = _allocator(1, need_sort=False)
    reader = KvReader(allocator)
    published = reader.read()
    taken = allocator.alloc(4 * pools_0523.WHOLE_READ_EDITS)
    for token in taken[::2]:  # a change of 512 ranges: read whole in one step, but for the steps before
        allocator.free(token.reshape(1))
    parts = 0
    while parts == 0 or reader._spread is not None:
        if parts:  # the allocator changes between the parts
            allocator.free(taken[1 + 2 * parts].reshape(1))
            allocator.alloc(3)
        reader.read_over_steps()
        parts += 1
    assert parts > 5 and reader.whole_reads == 2
    # The last read's fingerprint still names memory the reader holds (freed, another list's
    # tensor could take its address and length: `changed()` would say no change).
    assert reader._held[0].data_ptr() == reader._seen[0]
    # Nothing changed after the last part: still a change since the last read (the capture reads it).
    assert reader.changed() and reader.read() == KvReader(allocator).read() and reader.whole_reads == 2
    # That read edited the lists read over steps, not the state a client holds: no edit of it to send.
    assert reader.edit_since(published) is None
    reader.read_over_steps()  # nothing changed since: nothing to read
    assert reader._spread is None
