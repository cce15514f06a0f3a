"""Check `tp-agree` over streams: the ranks' states arrive each in step order (recordings read in
lockstep, or live sessions side by side), and each state is compared with its reference rank's
state at the same step (checks/cross_rank.py) as soon as both are there."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from .checks import Violation
from .checks.cross_rank import disagreements, reference_ranks
from .schema import CacheState, EngineInfo, Step

WINDOW = 32
"""States kept per rank while the other side of the comparison has not arrived (live ranks
publish the same step a few frames apart at most; recordings are read in lockstep)."""


class RankAgreement:
    """Feed every rank's states with `add`; it returns the disagreements found."""

    def __init__(self, infos: Sequence[EngineInfo | None]) -> None:
        self.references = reference_ranks(infos)
        self._held: dict[int, OrderedDict[Step, CacheState]] = {rank: OrderedDict() for rank in range(len(infos))}

    def add(self, rank: int, state: CacheState) -> list[Violation]:
        """Rank `rank`'s state at its step; the comparisons it completes."""
        step = Step(state.step)
        reference = self.references[rank]
        if reference is not None:
            theirs = self._held[reference].get(step)
            if theirs is not None:
                return disagreements(step, theirs, state, rank, reference)
            self._hold(rank, state)
            return []
        self._hold(rank, state)
        found = []
        for other, its_reference in enumerate(self.references):
            if its_reference == rank and (waiting := self._held[other].pop(step, None)) is not None:
                found += disagreements(step, state, waiting, other, rank)
        return found

    def _hold(self, rank: int, state: CacheState) -> None:
        held = self._held[rank]
        held[Step(state.step)] = state
        while len(held) > WINDOW:
            held.popitem(last=False)
