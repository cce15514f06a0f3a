"""Index tensors -> plain ints and KV runs, with one device-to-host copy per batch.

sglang keeps slot ids and KV token indices in small device tensors (one per tree node, one per
request field). Reading them one by one would put a device sync on every read, so callers
collect the tensors of a whole capture and convert them here in one copy.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mcinspect.schema import Runs

FrozenRuns = tuple[tuple[int, int], ...]
"""`Runs` as a tuple (runs_of_many): the same on the wire."""
IndexValue = Any
"""A torch int tensor (any shape), a Python int, a list of ints, or None (absent)."""


def kept(value: torch.Tensor, head: int | None = None) -> IndexValue:
    """`value` (its first `head` entries) as it is now, safe from sglang's later writes: on the
    host its ints at once (one read, where a copy and the drain's read were two torch calls),
    elsewhere a device copy the drain reads (no sync in a hook)."""
    if value.is_cpu:
        ints = value.tolist()
        return ints if head is None else ints[:head]
    return (value if head is None else value[:head]).clone()


def host_concat(values: Sequence[IndexValue]) -> tuple[np.ndarray, list[int]]:
    """All values as one int64 host array, and each value's length (0 for None)."""
    parts: list[torch.Tensor] = []
    lengths: list[int] = []
    for value in values:
        if value is None:
            lengths.append(0)
            continue
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor([value] if isinstance(value, int) else list(value), dtype=torch.int64)
        elif value.dim() != 1:
            value = value.reshape(-1)
        length = value.numel()
        lengths.append(length)
        if length:
            parts.append(value)
    return concat_on_host(parts), lengths


def concat_on_host(parts: Sequence[torch.Tensor]) -> np.ndarray:
    """1-d tensors (any devices, int32 or int64) as one int64 host array: one device copy."""
    if not parts:
        return np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        flat = parts[0]
    else:
        try:
            flat = torch.cat(list(parts))  # promotes int32 rows and int64 slots to int64
        except RuntimeError:  # values on different devices (rare): gather on the host
            flat = torch.cat([part.cpu() for part in parts])
    return flat.to("cpu", torch.int64).numpy()


def ints_of_many(values: Sequence[IndexValue]) -> list[list[int]]:
    """Each value's ints, in order ([] for None)."""
    if len(values) <= FEW_HOST_VALUES and all(value.is_cpu for value in values if isinstance(value, torch.Tensor)):
        return [_host_ints(value) for value in values]  # no device copy to save
    flat, lengths = host_concat(values)
    as_list = flat.tolist()
    out: list[list[int]] = []
    offset = 0
    for length in lengths:
        out.append(as_list[offset : offset + length])
        offset += length
    return out


class HostViews:
    """numpy views of host tensors, kept while the tensor is the same object: indexing one is a
    fraction of a torch op's fixed cost (sglang's per-row tables are read a few rows a step)."""

    def __init__(self) -> None:
        self._views: dict[int, tuple[torch.Tensor, np.ndarray]] = {}

    def of(self, tensor: torch.Tensor) -> np.ndarray | None:
        """`tensor`'s numpy view (shares its memory: reads see every write), or None off the host."""
        kept = self._views.get(id(tensor))
        if kept is not None and kept[0] is tensor:
            return kept[1]
        view = host_view(tensor)
        if view is None:
            return None
        if len(self._views) >= 8:  # sglang binds its tables once; a few at most are ever seen
            self._views.clear()
        self._views[id(tensor)] = (tensor, view)
        return view


def host_view(tensor: torch.Tensor) -> np.ndarray | None:
    """`tensor`'s numpy view (shares its memory: reads see every write), or None off the host."""
    if not tensor.is_cpu or tensor.requires_grad or tensor.dtype == torch.bool or tensor.is_conj():
        return None
    try:
        return tensor.numpy()
    except (RuntimeError, TypeError):  # a dtype or layout numpy cannot share
        return None


FEW_HOST_VALUES = 64
"""Up to this many values on the host, `tolist` each: a capture's request fields (0-d and
1-d tensors, Nones) take a third of the time of one concatenation and copy; past it (a tree's
nodes) the concatenation's lower cost per value wins."""


def _host_ints(value: IndexValue) -> list[int]:
    """One value's ints, for a value on the host."""
    if value is None:
        return []
    if not isinstance(value, torch.Tensor):
        return [value] if isinstance(value, int) else list(value)
    if value.dtype == torch.bool:
        value = value.to(torch.int64)
    if value.dim() != 1:
        value = value.reshape(-1)
    return value.tolist()


SMALL = 512
"""Up to this many ints, runs are found in a Python loop: numpy's fixed cost per call (about ten
calls of a few us each) is more than the loop's on the few tokens a decode step adds."""


def runs_of_many(values: Sequence[IndexValue]) -> list[FrozenRuns]:
    """Each value's (start, length) runs of consecutive indices (() for None or empty).

    Tuples, not lists: a capture keeps one per tree node. The cyclic GC stops tracking a tuple
    of ints at the first collection that sees it (a tuple of those at the next, mostly before
    it grows old), where a list stays tracked for good and, 100k at a time, sets off full
    collections over the engine's whole heap (seconds). They encode as the same msgpack arrays."""
    flat, lengths = host_concat(values)
    total = len(flat)
    if total <= SMALL:
        as_list = flat.tolist()
        out: list[FrozenRuns] = []
        offset = 0
        for length in lengths:
            out.append(runs_of_ints(as_list[offset : offset + length]))
            offset += length
        return out
    ends = np.cumsum(lengths)
    starts = ends - np.asarray(lengths)
    # A run starts where the index does not continue the previous one, or a value begins.
    new_run = np.ones(total, dtype=bool)
    new_run[1:] = flat[1:] != flat[:-1] + 1
    nonempty = np.asarray(lengths) > 0
    new_run[starts[nonempty]] = True
    run_starts = np.flatnonzero(new_run)
    run_lengths = np.diff(np.append(run_starts, total))
    owner = np.searchsorted(ends, run_starts, side="right")
    pairs = zip(flat[run_starts].tolist(), run_lengths.tolist())
    counts = np.bincount(owner, minlength=len(values)).tolist()
    return [tuple(itertools.islice(pairs, count)) for count in counts]


def runs_of_ints(ints: list[int]) -> FrozenRuns:
    """(start, length) runs of consecutive values in `ints` (host ints already read)."""
    if len(ints) == 1:  # a decode step's new token, a request a step
        return ((ints[0], 1),)
    if len(ints) > SMALL:
        return runs_of_many([torch.tensor(ints, dtype=torch.int64)])[0]
    runs: Runs = []
    start = previous = None
    for value in ints:
        if previous is not None and value == previous + 1:
            previous = value
            continue
        if start is not None:
            runs.append((start, previous - start + 1))
        start = previous = value
    if start is not None:
        runs.append((start, previous - start + 1))
    return tuple(runs)


def free_token_runs(free_pages: IndexValue, page_size: int) -> Runs:
    """Sorted runs of free token indices from free page ids (token ids when page_size is 1)."""
    flat, _ = host_concat([free_pages])
    return page_token_runs(flat, page_size)


def page_token_runs(pages: np.ndarray, page_size: int) -> Runs:
    """Sorted (start, length) token runs of a host array of page ids (a page listed twice
    counts once: an allocator bug runs cannot express)."""
    if len(pages) <= SMALL:  # a few pages: numpy's fixed cost per call is most of it
        return [(start * page_size, length * page_size) for start, length in runs_of_ints(sorted(set(pages.tolist())))]
    starts, lengths = free_run_arrays(pages, page_size)
    return list(zip(starts.tolist(), lengths.tolist()))


def free_run_arrays(flat: np.ndarray, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """`free_token_runs` of a host array of page ids as two arrays, token starts and lengths
    (the Python tuples are most of a long list's time: KvReader builds them over steps)."""
    if len(flat) == 0:
        return flat, flat
    # sglang's free list is a sorted remainder plus appended freed chunks: a few ascending
    # segments of consecutive pages. Find them in one pass, in the list's own order, and sort
    # and merge the segments, not the pages (sorting 650k pages was 10-20 ms a step).
    starts = np.flatnonzero(np.diff(flat) != 1) + 1
    starts = np.insert(starts, 0, 0)
    first, last = flat[starts], flat[np.append(starts[1:], len(flat)) - 1] + 1  # [first, last) a segment
    order = np.argsort(first, kind="stable")
    first, last = first[order], np.maximum.accumulate(last[order])
    # A segment joins the run before it when it starts at or before the run's end: adjacent
    # pages continue a run, and a page listed twice (an allocator bug runs cannot express) counts once.
    new_run = np.ones(len(first), dtype=bool)
    new_run[1:] = first[1:] > last[:-1]
    heads = np.flatnonzero(new_run)
    ends = last[np.append(heads[1:], len(first)) - 1]
    run_starts = first[heads]
    return run_starts * page_size, (ends - run_starts) * page_size


def version_of(value: Any) -> int | None:
    """A tensor's in-place write counter; None for anything without one: a list (sglang 0.5.12's
    free list) or an inference-mode tensor (the scheduler's loop creates those)."""
    if isinstance(value, torch.Tensor) and value.is_inference():  # asking one raises: 15 us, 50x this check
        return None
    try:
        return int(value._version)
    except (AttributeError, RuntimeError):
        return None
