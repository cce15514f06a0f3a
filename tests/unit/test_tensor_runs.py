"""tensor_runs.ints_of_many: its two ways of reading index values (each value's `tolist` for a
few host values, one concatenation and copy otherwise) give the same ints."""

from __future__ import annotations

import random

import pytest
import torch

from mcinspect_engine_hooks import tensor_runs


def mixed_values() -> list[tensor_runs.IndexValue]:
    """What a capture reads: 0-d slot ids, 1-d buffers, a 2-d mirror gather, int32 KV rows,
    Nones, plain ints and lists, and a bool tensor."""
    return [
        torch.tensor(7),
        torch.tensor([3, -1]),
        None,
        torch.arange(6).view(3, 2),
        torch.arange(10, 14, dtype=torch.int32),
        5,
        [1, 2],
        torch.tensor([True, False]),
        torch.zeros(0, dtype=torch.int64),
    ]


EXPECTED = [[7], [3, -1], [], [0, 1, 2, 3, 4, 5], [10, 11, 12, 13], [5], [1, 2], [1, 0], []]


@pytest.mark.parametrize("copies", [1, tensor_runs.FEW_HOST_VALUES])
def test_both_ways_give_the_same_ints(copies: int) -> None:
    """One set of values is few (tolist each), 64 sets are many (one concatenation)."""
    values = mixed_values() * copies
    out = tensor_runs.ints_of_many(values)
    assert out == EXPECTED * copies
    assert all(type(x) is int for ints in out for x in ints)  # bools come back as ints too


def set_runs(pages: list[int], page_size: int) -> list[tuple[int, int]]:
    """The oracle: runs of the set of pages, found one page at a time."""
    runs: list[tuple[int, int]] = []
    for page in sorted(set(pages)):
        if runs and runs[-1][0] + runs[-1][1] == page * page_size:
            runs[-1] = (runs[-1][0], runs[-1][1] + page_size)
        else:
            runs.append((page * page_size, page_size))
    return runs


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("seed", range(6))
def test_free_token_runs_of_a_long_free_list_match_the_set_of_its_pages(seed: int, page_size: int) -> None:
    """Past SMALL pages the runs come from the list's ascending segments, sorted and merged: as
    sglang keeps it (a sorted remainder, freed chunks appended in any order), with a page listed
    twice and chunks inside or touching others, they are the runs of the set of its pages."""
    rng = random.Random(seed)
    pages = list(range(rng.randrange(100, 200), 3_000))
    for _ in range(rng.randrange(1, 40)):  # freed chunks, appended
        start = rng.randrange(3_000, 6_000)
        pages += list(range(start, start + rng.randrange(1, 50)))
    pages += rng.sample(pages, 3)  # an allocator bug: pages listed twice
    pages += [150, 151, 3_000]  # touching the remainder from both ends
    if seed % 2:
        rng.shuffle(pages)  # no order at all: one segment a page, still the same runs
    out = tensor_runs.free_token_runs(torch.tensor(pages, dtype=torch.int64), page_size)
    assert out == set_runs(pages, page_size)


def test_kept_values_do_not_follow_later_writes_and_stay_on_their_device() -> None:
    """`kept` is what a hook holds of a slot tensor sglang rewrites later in the step: on the
    host the ints as they were (one read), elsewhere a copy on that device (no sync in a hook)."""
    host = torch.tensor([4, 5, 6])
    whole, head = tensor_runs.kept(host), tensor_runs.kept(host, 2)
    host[0] = 9
    assert (whole, head) == ([4, 5, 6], [4, 5]) and tensor_runs.kept(host[1]) == 5
    device = torch.empty(3, dtype=torch.int64, device="meta")  # not the host: a copy, not a read
    copied = tensor_runs.kept(device, 2)
    assert isinstance(copied, torch.Tensor) and copied.device == device.device and copied.shape == (2,)
    assert copied._base is None  # a copy of the head, not a view into what sglang rewrites


def test_version_of_counts_writes_and_is_none_where_nothing_counts_them() -> None:
    """A tensor's write counter; None for an inference tensor (the scheduler's loop makes its
    free lists as those: asking one raises inside torch, so it is not asked) and for a list."""
    counted = torch.zeros(3, dtype=torch.int64)
    before = tensor_runs.version_of(counted)
    counted[0] = 1
    assert before is not None and tensor_runs.version_of(counted) == before + 1
    with torch.inference_mode():
        uncounted = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(RuntimeError):
        uncounted._version  # noqa: B018  (what version_of must not run into)
    assert tensor_runs.version_of(uncounted) is None and tensor_runs.version_of([1, 2]) is None
