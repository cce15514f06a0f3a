"""tensor_runs.ints_of_many: its two ways of reading index values (each value's `tolist` for a
few host values, one concatenation and copy otherwise) give the same ints."""

from __future__ import annotations

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
