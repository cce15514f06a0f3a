"""The KV allocator's free runs brought up to date from what changed in its free lists, not
re-read whole: at 100k free-list segments (a pool fragmented by recomputed prefixes freed
again) a whole read was 20-40 ms of the scheduler's step, at every step the list changed.

sglang's allocators never write a free list in place: `alloc` binds a slice of its front,
`free` binds a new tensor with the freed pages appended (the token allocator, its release
list, the paged allocator's staged pages) or prepended (the paged allocator). So a list now is
the list last read less a front part, plus pages before or after it; `list_change` finds that
split by comparing the arrays (memcmp speed), and the sorted runs take the difference in one
pass (`edit_runs`). Anything else (a merge that sorts the lists, a page freed twice) returns
None: the caller reads the lists whole, as before.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from mcinspect.schema import Runs

from .tensor_runs import page_token_runs


def list_change(old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(removed, added) pages when `new` is `old[k:]` with pages prepended or appended: as sets,
    new = old - removed + added (a free list holds a page once). None when it is not."""
    if len(old) == 0 or len(new) == 0:
        return old, new
    m = min(len(old), len(new))
    if old[-1] == new[-1]:  # the front taken, pages prepended (or none added)
        differs = np.flatnonzero(old[len(old) - m :] != new[len(new) - m :])
        kept = m - int(differs[-1]) - 1 if len(differs) else m
        return old[: len(old) - kept], new[: len(new) - kept]
    at = np.flatnonzero(old == new[0])  # the front taken, pages appended
    if len(at) == 1:
        k = int(at[0])
        kept = len(old) - k
        if kept <= len(new) and np.array_equal(new[:kept], old[k:]):
            return old[:k], new[kept:]
    return None


Ranges = list[tuple[int, int]]
"""Sorted, disjoint [start, end) token ranges."""


def segments(pages: np.ndarray) -> int:
    """Runs of consecutive pages in `pages` as listed: at least as many as its sorted ranges."""
    return int(np.count_nonzero(np.diff(pages) != 1)) + 1 if len(pages) else 0


def token_ranges(pages: np.ndarray, page_size: int) -> Ranges:
    """Sorted [start, end) token ranges of `pages`, found as a whole read finds the runs."""
    return [(start, start + length) for start, length in page_token_runs(pages, page_size)]


def edit_runs(runs: Runs, removed: Ranges, added: Ranges) -> Runs | None:
    """`runs` (sorted, disjoint, maximal (start, length) runs) less the sorted token ranges
    `removed`, plus `added`, as a new list (`runs` unchanged; one pass over it however many
    ranges change). None when a removed token is not in `runs` or an added one already is."""
    out: Runs | None = _remove(runs, removed) if removed else list(runs)
    if out is not None and added:
        out = _add(out, added)
    return out


def _start(run: tuple[int, int]) -> int:
    return run[0]


def _remove(runs: Runs, ranges: list[tuple[int, int]]) -> Runs | None:
    """Each range lies inside one run (runs are maximal: a range over two would be a gap)."""
    edits: list[tuple[int, list[tuple[int, int]]]] = []  # (run index, what is left of it)
    for a, b in ranges:
        i = bisect_right(runs, a, key=_start) - 1
        if edits and edits[-1][0] == i:  # another range in the same run: cut what is left of it
            pieces = edits[-1][1]
            start, length = pieces.pop() if pieces else (a, 0)
        else:
            if i < 0:
                return None
            start, length = runs[i]
            pieces = []
            edits.append((i, pieces))
        end = start + length
        if not (start <= a and b <= end):
            return None
        if start < a:
            pieces.append((start, a - start))
        if b < end:
            pieces.append((b, end - b))
    return _splice(runs, [(i, i + 1, pieces) for i, pieces in edits])


def _add(runs: Runs, ranges: list[tuple[int, int]]) -> Runs | None:
    """Adjacent ranges and runs merge into one run; an overlap is a page freed twice."""
    merged: list[tuple[int, int]] = []
    for a, b in ranges:
        if merged and merged[-1][1] >= a:
            if merged[-1][1] > a:
                return None
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    edits: list[tuple[int, int, int, int]] = []  # (first run replaced, past the last, start, end)
    for a, b in merged:
        i = bisect_left(runs, a, key=_start)
        lo, hi, start, end = i, i, a, b
        if i > 0:
            before = runs[i - 1][0] + runs[i - 1][1]
            if before > a:
                return None
            if before == a:
                lo, start = i - 1, runs[i - 1][0]
        if i < len(runs):
            if runs[i][0] < b:
                return None
            if runs[i][0] == b:
                hi, end = i + 1, runs[i][0] + runs[i][1]
        if edits and edits[-1][1] > lo:  # this range and the one before both join the run between them
            lo, _, start, _ = edits.pop()
        edits.append((lo, hi, start, end))
    return _splice(runs, [(lo, hi, [(start, end - start)]) for lo, hi, start, end in edits])


def _splice(runs: Runs, edits: list[tuple[int, int, list[tuple[int, int]]]]) -> Runs:
    """`runs` with each [lo, hi) replaced by its pieces (edits sorted, disjoint): slices of
    references, not a tuple rebuilt."""
    out: Runs = []
    at = 0
    for lo, hi, pieces in edits:
        out += runs[at:lo]
        out += pieces
        at = hi
    out += runs[at:]
    return out
