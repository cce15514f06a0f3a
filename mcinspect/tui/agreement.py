"""Check `tp-agree` between the ranks the inspector follows, on a worker thread: each step that a
rank and its reference rank (checks/cross_rank.py) both hold a frame of is compared once both
frames were checked on their own, and the disagreements join the compared rank's findings at
its frame, where the violations tab, `v` and the header count them.

Each compared pair walks both ranks' states forward by the frames' deltas (state_cursor.py) and
compares only the records those changed and those that disagreed (`PairAgreement`); a rank whose
checks run ahead of the other's only waits. A step the reference rank never captured (a
sampled live stream captures each rank at its own moments) is passed over once the reference
has gone beyond it.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence

from textual.app import App

from ..checks.cross_rank import PairAgreement, RankKeys, reference_ranks
from .messages import FindingsAdvanced
from .rank_view import RankView
from .source import FrameGone
from .state_cursor import StateCursor
from .violations import ViolationRow


class AgreementIngestor:
    """One worker at a time compares whatever became comparable (`kick` from the UI thread)."""

    def __init__(self, app: App[None], views: Callable[[], Sequence[RankView]]) -> None:
        self._app = app
        self._views = views
        self._next: dict[int, int] = {}
        """Per compared rank, the index of its first frame not compared or passed over yet."""
        self._pairs: dict[int, tuple[PairAgreement, StateCursor, StateCursor]] = {}
        """Per compared rank: its agreement with its reference, and both ranks' states."""
        self._compared: dict[int, list[int]] = {}
        """Per compared rank, the frames compared (ascending, those its source still holds)."""
        self._lock = threading.Lock()
        self._running = False
        self._again = False
        """A kick arrived while the worker ran: it takes one more pass."""

    def kick(self) -> None:
        """Compare what became comparable (call from the UI thread after new frames were checked)."""
        with self._lock:
            if len(self._views()) < 2:
                return
            if self._running:
                self._again = True
                return
            self._running = True
        self._app.run_worker(self._run, thread=True, group="agreement", exit_on_error=False)

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    self._again = False
                compared, found = self._compare_what_is_ready()
                if compared:  # the ranks tab's verdicts at those steps are known now
                    self._app.post_message(FindingsAdvanced(found))
                with self._lock:
                    if not self._again:
                        self._running = False
                        return
        except BaseException:
            with self._lock:
                self._running = False
            raise

    def compared(self, rank: int, index: int) -> bool:
        """Whether rank `rank`'s frame `index` was compared with its reference (its tp-agree
        findings there are then all there are; any thread)."""
        with self._lock:
            done = self._compared.get(rank, [])
            at = bisect.bisect_left(done, index)
            return at < len(done) and done[at] == index

    def _compare_what_is_ready(self) -> tuple[int, int]:
        """One pass over the ranks: the frames compared and the disagreements found."""
        views = list(self._views())
        references = reference_ranks([view.source.engine() for view in views])
        compared = found = 0
        for rank, reference in enumerate(references):
            if reference is not None:
                frames, rows = self._compare(rank, views[rank], reference, views[reference])
                compared, found = compared + frames, found + rows
        return compared, found

    def _compare(self, rank: int, view: RankView, reference: int, theirs: RankView) -> tuple[int, int]:
        """The frames of rank `rank` compared now, and the disagreements found in them."""
        checked = [frame for frame in view.source.frames() if frame.index < view.findings.next_frame]
        their_checked = [frame for frame in theirs.source.frames() if frame.index < theirs.findings.next_frame]
        if not checked or not their_checked:
            return 0, 0
        their_frames = {frame.step: frame for frame in their_checked}
        their_newest = their_checked[-1].step
        start = self._next.get(rank, checked[0].index)
        compared: list[int] = []
        found = 0
        for frame in checked:
            if frame.index < start:
                continue
            theirs_here = their_frames.get(frame.step)
            if theirs_here is None and frame.step >= their_newest:
                break  # the reference may still bring this step
            self._next[rank] = frame.index + 1
            if theirs_here is None:
                continue  # the reference has no frame of this step
            pair, our_states, their_states = self._pair(rank, view, reference, theirs)
            try:
                ours, our_changes = our_states.at(frame.index)
                reference_state, their_changes = their_states.at(theirs_here.index)
            except FrameGone:  # what changed since the last compared step is not known now
                self._pairs.pop(rank, None)
                continue
            changed = RankKeys.joined(our_changes, their_changes)
            rows = [ViolationRow(frame.index, v) for v in pair.compare(ours.step, reference_state, ours, changed)]
            view.findings.add(rows)
            found += len(rows)
            compared.append(frame.index)
        with self._lock:
            done = self._compared.setdefault(rank, [])
            del done[: bisect.bisect_left(done, checked[0].index)]  # frames the source let go
            done += compared
        return len(compared), found

    def _pair(self, rank: int, view: RankView, reference: int, theirs: RankView) -> tuple[PairAgreement, StateCursor, StateCursor]:
        """Rank `rank`'s agreement and state cursors, made afresh when either source changed."""
        kept = self._pairs.get(rank)
        if kept is None or kept[0].reference != reference or kept[1].source is not view.source or kept[2].source is not theirs.source:
            kept = self._pairs[rank] = (PairAgreement(rank, reference), StateCursor(view.source), StateCursor(theirs.source))
        return kept
