"""Sorted free runs edited by what changed in them: the engine's KV reader keeps the allocator's
free runs this way (engine_hooks/kv_free_edits.py), and a client applies a Delta's `KvEdit` the
same way, so that neither re-reads nor re-sends a fragmented pool's whole list (62k runs, 414 KB a
step) when a step took a few pages and gave a few back.

Runs are (start, length) token runs, sorted, disjoint and maximal (adjacent runs are one).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable

Run = tuple[int, int]
Runs = list[Run]
"""Compressed index list: (start, length) runs of consecutive KV token indices (the schema's)."""


def edit_runs(runs: Runs, removed: Runs, added: Runs) -> Runs | None:
    """`runs` less the sorted runs `removed`, plus the sorted runs `added`, as a new list (`runs`
    unchanged; one pass over it however many runs change). None when a removed token is not in
    `runs` or an added one already is."""
    out: Runs | None = _remove(runs, removed) if removed else list(runs)
    if out is not None and added:
        out = _add(out, added)
    return out


def edited_leniently(runs: Runs, removed: Runs, added: Runs) -> Runs:
    """`edit_runs` as sets, for any `runs`: (runs - removed) | added, maximal runs. O(all the
    runs): for a state that the edit was not made from (past a seq gap)."""
    return as_runs(intervals([*as_runs(subtract(intervals(runs), intervals(removed))), *added]))


Intervals = tuple[list[int], list[int]]
"""Sorted, merged, half-open intervals as (starts, ends), for bisection."""


def intervals(runs: Iterable[Run]) -> Intervals:
    """Merge runs into sorted disjoint intervals."""
    starts: list[int] = []
    ends: list[int] = []
    for start, length in sorted(runs):
        if length <= 0:
            continue
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], start + length)
        else:
            starts.append(start)
            ends.append(start + length)
    return starts, ends


def as_runs(spans: Intervals) -> Runs:
    """Intervals as (start, length) runs."""
    starts, ends = spans
    return [(start, end - start) for start, end in zip(starts, ends)]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """a minus b (both sorted and merged)."""
    out_starts: list[int] = []
    out_ends: list[int] = []
    b_starts, b_ends = b
    j = 0
    for start, end in zip(*a):
        while j < len(b_starts) and b_ends[j] <= start:
            j += 1
        k = j
        cursor = start
        while k < len(b_starts) and b_starts[k] < end:
            if b_starts[k] > cursor:
                out_starts.append(cursor)
                out_ends.append(b_starts[k])
            cursor = max(cursor, b_ends[k])
            k += 1
        if cursor < end:
            out_starts.append(cursor)
            out_ends.append(end)
    return out_starts, out_ends


def run_start(run: Run) -> int:
    """A run's first token: the key sorted runs are bisected by."""
    return run[0]


def _remove(runs: Runs, removed: Runs) -> Runs | None:
    """Each removed run lies inside one run (runs are maximal: one over two would be a gap)."""
    edits: list[tuple[int, Runs]] = []  # (run index, what is left of it)
    for a, length in removed:
        b = a + length
        i = bisect_right(runs, a, key=run_start) - 1
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


def _add(runs: Runs, added: Runs) -> Runs | None:
    """Adjacent ranges and runs merge into one run; an overlap is a page freed twice."""
    merged: list[tuple[int, int]] = []  # [start, end)
    for a, length in added:
        b = a + length
        if merged and merged[-1][1] >= a:
            if merged[-1][1] > a:
                return None
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    edits: list[tuple[int, int, int, int]] = []  # (first run replaced, past the last, start, end)
    for a, b in merged:
        i = bisect_left(runs, a, key=run_start)
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


def _splice(runs: Runs, edits: list[tuple[int, int, Runs]]) -> Runs:
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


def outside(tokens: Intervals, runs: Runs) -> Intervals:
    """`tokens` less the sorted, disjoint `runs`: a bisection a token interval, not a pass over
    `runs` (a client's tokens freed by a step's edit, against the free list before it)."""
    out_starts: list[int] = []
    out_ends: list[int] = []
    for start, end in zip(*tokens):
        cursor = start
        i = max(bisect_right(runs, start, key=run_start) - 1, 0)
        while i < len(runs) and runs[i][0] < end:
            first, past = runs[i][0], runs[i][0] + runs[i][1]
            if past > cursor:
                if first > cursor:
                    out_starts.append(cursor)
                    out_ends.append(first)
                cursor = max(cursor, past)
            i += 1
        if cursor < end:
            out_starts.append(cursor)
            out_ends.append(end)
    return out_starts, out_ends
