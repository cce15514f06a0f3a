"""A rank's state walked forward frame by frame, for the cross-rank comparison in the TUI.

The comparison reads each compared frame's state once and moves on, so one state per rank and
pair is moved in place by the frames' deltas (a 100k-node frame rebuilt by the source is a copy
and up to 100 deltas) and says which records those deltas changed (`PairAgreement` then compares
only them and the ones that disagreed).
"""

from __future__ import annotations

from ..checks.cross_rank import RankKeys
from ..schema import CacheState, apply_delta
from .source import DataSource


class StateCursor:
    """One source's state at the frame last asked for (the source's `state_at` hands out copies
    wherever its `delta_at` has deltas: the cursor edits the state it holds)."""

    def __init__(self, source: DataSource) -> None:
        self.source = source
        self._at: tuple[int, CacheState] | None = None

    def at(self, index: int) -> tuple[CacheState, RankKeys | None]:
        """The state at frame `index` (read it before the next call), and the records changed
        since the frame of the last call (None: not known; the state was rebuilt). Raises
        FrameGone where the source no longer holds the frame."""
        at = self._at
        if at is not None and at[0] <= index:
            state, changed = at[1], RankKeys()
            for step_index in range(at[0] + 1, index + 1):
                delta = self.source.delta_at(step_index)
                if delta is None:
                    break
                apply_delta(state, delta)
                changed.update(RankKeys.of_delta(delta))
            else:
                self._at = (index, state)
                return state, changed
        self._at = None  # a state moved part of the way is no frame's
        state = self.source.state_at(index)
        self._at = (index, state)
        return state, None
