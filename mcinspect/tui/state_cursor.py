"""A rank's state walked forward frame by frame, for the cross-rank comparison in the TUI.

The comparison reads each compared frame's state once and moves on, so one state per rank and
pair is moved in place by the frames' deltas (a 100k-node frame rebuilt by the source is a copy
and up to 100 deltas) and says which records those deltas changed (`PairAgreement` then compares
only them and the ones that disagreed).
"""

from __future__ import annotations

from ..checks.cross_rank import RankKeys
from ..schema import CacheState, apply_delta
from .source import DataSource, deltas_between


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
        deltas = deltas_between(self.source, at[0], index) if at is not None else None
        if at is not None and deltas is not None:
            state, changed = at[1], RankKeys()
            for delta in deltas:
                apply_delta(state, delta)
                changed.update(RankKeys.of_delta(delta))
            self._at = (index, state)
            return state, changed
        self._at = None  # kept out of a state the source may fail to hand out
        state = self.source.state_at(index)
        self._at = (index, state)
        return state, None
