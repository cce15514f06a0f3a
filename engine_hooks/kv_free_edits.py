"""The KV allocator's free runs brought up to date from what changed in its free lists, not
re-read whole: at 100k free-list segments (a pool fragmented by recomputed prefixes freed
again) a whole read was 20-40 ms of the scheduler's step, at every step the list changed.

sglang's allocators never write a free list in place: `alloc` binds a slice of its front,
`free` binds a new tensor with the freed pages appended (the token allocator, its release
list, the paged allocator's staged pages) or prepended (the paged allocator). So a list now is
the list last read less a front part, plus pages before or after it; `list_change` finds that
split by comparing the arrays (memcmp speed), and the sorted runs take the difference in one
pass (`mcinspect.run_edits.edit_runs`, with which a client applies the Delta's `KvEdit` too).
Anything else (a merge that sorts the lists, a page freed twice) returns None: the caller
reads the lists whole, as before.
"""

from __future__ import annotations

import numpy as np


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


def segments(pages: np.ndarray) -> int:
    """Runs of consecutive pages in `pages` as listed: at least as many as its sorted ranges."""
    return int(np.count_nonzero(np.diff(pages) != 1)) + 1 if len(pages) else 0
