"""Check `tp-agree`: the tensor-parallel ranks of one engine hold the same cache bookkeeping.

Every TP rank runs its own scheduler over the same batches, with its own tree and its own shard
of each mamba slot, so at the same step the ranks must agree on everything but the shards:
the same nodes (parent, key, depth, KV indices, mamba slot, lock refs, LRU and leaf membership,
hit count), the same owner of every mamba slot, the same requests with the same slots. What
legitimately differs: slot contents and fingerprints (each rank holds its heads' shard),
`last_access` (each rank's clock), the ports and pids. A rank that diverges serves wrong states
for its heads only: answers degrade while rank 0's view looks healthy.

Which ranks run the same batches: those of one data-parallel replica and pipeline stage, and
under attention data parallelism only those of one attention group (sglang's `dp_rank` is then
the group). Each rank is compared with the first rank of its group (`reference_ranks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mcinspect.schema import CacheState, Delta, EngineInfo, NodeId, Rid, SlotId, Step

from .history import StepView
from .violation import Violation

TP_AGREE = "tp-agree"
RANK_LOCAL_NODE_FIELDS = ("last_access",)
"""Node fields each rank stamps from its own clock."""
MAX_PER_STEP = 8
"""Disagreements reported per rank and step (the first ones; the rest usually follow from them)."""


def across_ranks_only(view: StepView) -> list[Violation]:
    """One rank's step has nothing to compare with: check_runner runs `disagreements` on the
    recordings of several ranks."""
    return []


def reference_ranks(infos: Sequence[EngineInfo | None]) -> list[int | None]:
    """Per rank (in rank order), the rank it is compared with: the first of those that run the
    same batches (same dp_rank and pp_rank); None for that first one. Ranks of unknown placement
    (no EngineInfo) count as plain TP ranks of one group."""
    first: dict[tuple[int, int], int] = {}
    found: list[int | None] = []
    for rank, info in enumerate(infos):
        group = (info.dp_rank, info.pp_rank) if info is not None else (0, 0)
        found.append(first.get(group))
        first.setdefault(group, rank)
    return found


def disagreements(step: Step, reference: CacheState, other: CacheState, rank: int, reference_rank: int = 0) -> list[Violation]:
    """Where rank `rank`'s state differs from rank `reference_rank`'s at `step`, most telling
    first: requests (with the slots each rank gave them), then slots, then nodes."""
    return _compare(_Pair(step, rank, reference_rank), reference, other, RankKeys.of_states(reference, other))[0][:MAX_PER_STEP]


@dataclass
class RankKeys:
    """Records of a rank's state by kind: those a delta changed, or those where two ranks disagree."""

    nodes: set[NodeId] = field(default_factory=set)
    slots: set[SlotId] = field(default_factory=set)
    requests: set[Rid] = field(default_factory=set)

    @classmethod
    def of_delta(cls, delta: Delta) -> RankKeys:
        return cls(
            {node.id for node in delta.upsert_nodes}.union(delta.removed_nodes),
            set(delta.slots),
            {record.rid for record in delta.upsert_requests}.union(delta.removed_requests, (g.rid for g in delta.grown_requests)),
        )

    @classmethod
    def of_states(cls, *states: CacheState) -> RankKeys:
        """Every record of the states."""
        keys = cls()
        for state in states:
            keys.update(cls(set(state.nodes), set(state.slots), set(state.requests)))
        return keys

    def update(self, other: RankKeys) -> None:
        self.nodes |= other.nodes
        self.slots |= other.slots
        self.requests |= other.requests

    @classmethod
    def joined(cls, *changes: RankKeys | None) -> RankKeys | None:
        """Every record any of `changes` names; None when one of them is not known."""
        out = cls()
        for keys in changes:
            if keys is None:
                return None
            out.update(keys)
        return out


class PairAgreement:
    """`tp-agree` of one rank against its reference rank, step after step. Where the records
    both ranks changed since the last step compared are known, only those and the ones that
    disagreed then are compared: the others agree as they did (two ranks at 100k nodes: 284 ->
    2.4 ms a step, tests/bench/bench_check_step.py --ranks)."""

    def __init__(self, rank: int, reference: int) -> None:
        self.rank, self.reference = rank, reference
        self._last: tuple[Step, RankKeys] | None = None
        """The last step compared, and every record on which the ranks disagreed there."""

    @property
    def last_step(self) -> Step | None:
        return self._last[0] if self._last is not None else None

    def compare(self, step: Step, reference: CacheState, other: CacheState, changed: RankKeys | None) -> list[Violation]:
        """`disagreements` at `step`; `changed`: the records either rank changed since
        `last_step` (None: not known; every record is compared)."""
        if changed is None or self._last is None:
            keys = RankKeys.of_states(reference, other)
        else:
            keys = RankKeys()
            keys.update(changed)
            keys.update(self._last[1])
        found, differing = _compare(_Pair(step, self.rank, self.reference), reference, other, keys)
        self._last = (step, differing)
        return found[:MAX_PER_STEP]


def _compare(pair: _Pair, reference: CacheState, other: CacheState, keys: RankKeys) -> tuple[list[Violation], RankKeys]:
    """Every disagreement among `keys`, most telling first, and the records they are about."""
    requests, slots, nodes = (
        _requests(pair, reference, other, keys.requests),
        _slots(pair, reference, other, keys.slots),
        _nodes(pair, reference, other, keys.nodes),
    )
    found = [violation for _, violation in (*requests, *slots, *nodes)]
    return found, RankKeys({key for key, _ in nodes}, {key for key, _ in slots}, {key for key, _ in requests})


@dataclass(frozen=True)
class _Pair:
    """The two ranks compared, and the step."""

    step: Step
    rank: int
    reference: int

    def violation(self, reason: str, **touched: Any) -> Violation:
        return Violation(check=TP_AGREE, step=self.step, reason=reason, **touched)


def _requests(pair: _Pair, reference: CacheState, other: CacheState, rids: set[Rid]) -> list[tuple[Rid, Violation]]:
    found = []
    for rid in sorted(rids):
        ours, theirs = reference.requests.get(rid), other.requests.get(rid)
        if ours == theirs:
            continue
        if ours is None or theirs is None:
            found.append((rid, pair.violation(f"request {rid} is held on {_only_on(theirs, pair)}", rids=(Rid(rid),))))
            continue
        slots = (ours.working_slot, *ours.ping_pong, theirs.working_slot, *theirs.ping_pong)
        violation = pair.violation(
            f"request {rid} differs on rank {pair.rank}: {_differences(ours, theirs, pair)}",
            rids=(Rid(rid),),
            slots=tuple(dict.fromkeys(SlotId(s) for s in slots if s >= 0)),
        )
        found.append((rid, violation))
    return found


def _slots(pair: _Pair, reference: CacheState, other: CacheState, keys: set[SlotId]) -> list[tuple[SlotId, Violation]]:
    found = []
    for slot in sorted(keys):
        ours, theirs = reference.slots.get(slot, []), other.slots.get(slot, [])
        if ours == theirs:
            continue
        violation = pair.violation(
            f"rank {pair.rank} disagrees with rank {pair.reference} on slot {slot}: "
            f"{_claims(theirs)} there, {_claims(ours)} on rank {pair.reference}",
            slots=(SlotId(slot),),
            nodes=tuple(dict.fromkeys(NodeId(c.node) for c in [*ours, *theirs] if c.node >= 0)),
            rids=tuple(dict.fromkeys(Rid(c.rid) for c in [*ours, *theirs] if c.rid)),
        )
        found.append((slot, violation))
    return found


def _nodes(pair: _Pair, reference: CacheState, other: CacheState, keys: set[NodeId]) -> list[tuple[NodeId, Violation]]:
    found = []
    for node in sorted(keys):
        ours, theirs = reference.nodes.get(node), other.nodes.get(node)
        if ours is None and theirs is None:  # gone on both (a key a delta removed)
            continue
        if ours is None or theirs is None:
            found.append((node, pair.violation(f"node {node} exists on {_only_on(theirs, pair)}", nodes=(NodeId(node),))))
        elif detail := _differences(ours, theirs, pair, ignored=RANK_LOCAL_NODE_FIELDS):
            found.append((node, pair.violation(f"node {node} differs on rank {pair.rank}: {detail}", nodes=(NodeId(node),))))
    return found


def _only_on(theirs: object | None, pair: _Pair) -> str:
    """Where a record that one rank lacks exists (`theirs`: rank `pair.rank`'s, None if it lacks it)."""
    return f"rank {pair.reference} only" if theirs is None else f"rank {pair.rank} only"


def _differences(ours: msgspec.Struct, theirs: msgspec.Struct, pair: _Pair, ignored: tuple[str, ...] = ()) -> str:
    """The first fields (up to 3) in which the rank's record differs from the reference's; "" if none."""
    fields = [f for f in ours.__struct_fields__ if f not in ignored and getattr(ours, f) != getattr(theirs, f)]
    return ", ".join(f"{f} {getattr(theirs, f)!r} there, {getattr(ours, f)!r} on rank {pair.reference}" for f in fields[:3])


def _claims(claims: list) -> str:
    if not claims:
        return "free"
    return ", ".join(f"{c.kind}" + (f" node {c.node}" if c.node >= 0 else "") + (f" request {c.rid}" if c.rid else "") for c in claims)
