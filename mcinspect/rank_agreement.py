"""Check `tp-agree` over streams: the ranks' states arrive each in step order (recordings read in
lockstep, or live sessions side by side), and each state is compared with its reference rank's
state at the same step (checks/cross_rank.py) as soon as both are there.

A state is held only while the other side may still bring its step: a reference rank's until
every rank compared with it has gone past that step, another rank's until its reference has.
Ranks in lockstep hold one state each; a rank far behind (a burst after a resync) at most
MAX_HELD, the oldest going first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from .checks import Violation
from .checks.cross_rank import disagreements, reference_ranks
from .schema import CacheState, EngineInfo, Step

MAX_HELD = 256
"""States held per rank at most (each is one step's state of that rank's tree)."""


class RankAgreement:
    """Feed every rank's states with `add`; it returns the disagreements found."""

    def __init__(self, infos: Sequence[EngineInfo | None]) -> None:
        self.references = reference_ranks(infos)
        self._held: dict[int, OrderedDict[Step, CacheState]] = {rank: OrderedDict() for rank in range(len(infos))}
        self._latest: dict[int, int] = {}
        self._compared: dict[int, list[int]] = {
            rank: [other for other, reference in enumerate(self.references) if reference == rank] for rank in range(len(infos))
        }

    def add(self, rank: int, state: CacheState) -> list[Violation]:
        """Rank `rank`'s state at its step; the comparisons it completes."""
        step = Step(state.step)
        self._latest[rank] = step
        reference = self.references[rank]
        found: list[Violation] = []
        if reference is not None:
            theirs = self._held[reference].get(step)
            if theirs is not None:
                found = disagreements(step, theirs, state, rank, reference)
            elif self._latest.get(reference, -1) < step:  # the reference may still bring this step
                self._hold(rank, state)
        elif self._compared[rank]:
            self._hold(rank, state)
            for other in self._compared[rank]:
                if (waiting := self._held[other].pop(step, None)) is not None:
                    found += disagreements(step, state, waiting, other, rank)
        self._let_go()
        return found

    def _hold(self, rank: int, state: CacheState) -> None:
        held = self._held[rank]
        held[Step(state.step)] = state
        while len(held) > MAX_HELD:
            held.popitem(last=False)

    def _let_go(self) -> None:
        """Drop the states no comparison can need any more."""
        for rank, held in self._held.items():
            reference = self.references[rank]
            if reference is None:
                others = self._compared[rank]
                passed = min((self._latest.get(other, -1) for other in others), default=-1)
            else:
                passed = self._latest.get(reference, -1)
            while held and next(iter(held)) < passed:
                held.popitem(last=False)
