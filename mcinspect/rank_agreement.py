"""Check `tp-agree` over streams: the ranks' states arrive each in step order (recordings read in
lockstep, or live sessions side by side), and each state is compared with its reference rank's
state at the same step (checks/cross_rank.py) as soon as both are there.

A state is held only while the other side may still bring its step: a reference rank's until
every rank compared with it has gone past that step, another rank's until its reference has.
Ranks in lockstep hold one state each; a rank far behind (a burst after a resync) at most
MAX_HELD, the oldest going first. Beside them, each rank's frames since its pairs' last compared
step say which records the frame's delta changed (`PairAgreement`: a step then compares those
alone, not every record of both trees).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from .check_driver import delta_after
from .checks import Violation
from .checks.cross_rank import PairAgreement, RankKeys, reference_ranks
from .schema import CacheState, Delta, EngineInfo, Snapshot, Step

MAX_HELD = 256
"""States held per rank at most (each is one step's state of that rank's tree); as many frames'
changed records."""


class RankAgreement:
    """Feed every rank's states with `add`; it returns the disagreements found."""

    def __init__(self, infos: Sequence[EngineInfo | None]) -> None:
        self.references = reference_ranks(infos)
        self._held: dict[int, OrderedDict[Step, CacheState]] = {rank: OrderedDict() for rank in range(len(infos))}
        self._latest: dict[int, int] = {}
        self._compared: dict[int, list[int]] = {
            rank: [other for other, reference in enumerate(self.references) if reference == rank] for rank in range(len(infos))
        }
        self._pairs = {rank: PairAgreement(rank, reference) for rank, reference in enumerate(self.references) if reference is not None}
        self._changes: dict[int, OrderedDict[Step, RankKeys | None]] = {rank: OrderedDict() for rank in range(len(infos))}
        """Per rank, the records each frame's delta changed (None: not known), by step."""
        self._seq: dict[int, int | None] = {}

    def add(self, rank: int, state: CacheState, frame: Delta | Snapshot | None = None) -> list[Violation]:
        """Rank `rank`'s state at its step; the comparisons it completes. `frame`: the message the
        state came of (a Delta that follows the rank's last one says what changed)."""
        step = Step(state.step)
        self._log_changes(rank, step, frame)
        self._latest[rank] = step
        reference = self.references[rank]
        found: list[Violation] = []
        if reference is not None:
            theirs = self._held[reference].get(step)
            if theirs is not None:
                found = self._compare(rank, step, theirs, state)
            elif self._latest.get(reference, -1) < step:  # the reference may still bring this step
                self._hold(rank, state)
        elif self._compared[rank]:
            self._hold(rank, state)
            for other in self._compared[rank]:
                if (waiting := self._held[other].pop(step, None)) is not None:
                    found += self._compare(other, step, state, waiting)
        self._let_go()
        return found

    def _log_changes(self, rank: int, step: Step, frame: Delta | Snapshot | None) -> None:
        last_seq, self._seq[rank] = self._seq.get(rank), frame.seq if frame is not None else None
        delta = delta_after(last_seq, frame)
        changes = self._changes[rank]
        changes[step] = RankKeys.of_delta(delta) if delta is not None else None
        while len(changes) > MAX_HELD:
            changes.popitem(last=False)

    def _compare(self, rank: int, step: Step, reference_state: CacheState, state: CacheState) -> list[Violation]:
        pair = self._pairs[rank]
        changed = self._changed_since(pair, step)
        return pair.compare(step, reference_state, state, changed)

    def _changed_since(self, pair: PairAgreement, step: Step) -> RankKeys | None:
        """The records either rank of `pair` changed after its last compared step up to `step`;
        None where a frame between says nothing (or the frames of that step are gone)."""
        since = pair.last_step
        if since is None:
            return None
        changed: list[RankKeys | None] = []
        for rank in (pair.rank, pair.reference):
            frames = self._changes[rank]
            if since not in frames:
                return None
            changed += [keys for at, keys in frames.items() if since < at <= step]
        return RankKeys.joined(*changed)

    def _hold(self, rank: int, state: CacheState) -> None:
        held = self._held[rank]
        held[Step(state.step)] = state
        while len(held) > MAX_HELD:
            held.popitem(last=False)

    def _let_go(self) -> None:
        """Drop the states no comparison can need any more, and the changes of the frames before
        every pair's last compared step."""
        for rank, held in self._held.items():
            reference = self.references[rank]
            if reference is None:
                others = self._compared[rank]
                passed = min((self._latest.get(other, -1) for other in others), default=-1)
            else:
                passed = self._latest.get(reference, -1)
            while held and next(iter(held)) < passed:
                held.popitem(last=False)
        for rank, changes in self._changes.items():
            pairs = [self._pairs[other] for other in self._compared[rank]] + ([self._pairs[rank]] if rank in self._pairs else [])
            steps = [pair.last_step for pair in pairs]
            if not steps or None in steps:
                continue
            oldest = min(step for step in steps if step is not None)
            while changes and next(iter(changes)) < oldest:
                changes.popitem(last=False)
