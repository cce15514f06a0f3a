"""Check `tp-agree`: the tensor-parallel ranks of one engine hold the same cache bookkeeping.

Every TP rank runs its own scheduler over the same batches, with its own tree and its own shard
of each mamba slot, so at the same step the ranks must agree on everything but the shards:
the same nodes (parent, key, depth, KV indices, mamba slot, lock refs, LRU and leaf membership,
hit count), the same owner of every mamba slot, the same requests with the same slots. What
legitimately differs: slot contents and fingerprints (each rank holds its heads' shard),
`last_access` (each rank's clock), the ports and pids. A rank that diverges serves wrong states
for its heads only: answers degrade while rank 0's view looks healthy.
"""

from __future__ import annotations

import msgspec

from mcinspect.schema import CacheState, NodeId, Rid, SlotId, Step

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


def disagreements(step: Step, reference: CacheState, other: CacheState, rank: int) -> list[Violation]:
    """Where rank `rank`'s state differs from rank 0's at `step`, most telling first: requests
    (with the slots each rank gave them), then slots, then nodes."""
    found = [*_requests(step, reference, other, rank), *_slots(step, reference, other, rank), *_nodes(step, reference, other, rank)]
    return found[:MAX_PER_STEP]


def _requests(step: Step, reference: CacheState, other: CacheState, rank: int) -> list[Violation]:
    found = []
    for rid in sorted(reference.requests.keys() | other.requests.keys()):
        ours, theirs = reference.requests.get(rid), other.requests.get(rid)
        if ours == theirs:
            continue
        if ours is None or theirs is None:
            found.append(
                Violation(check=TP_AGREE, step=step, reason=f"request {rid} is held on {_only_on(theirs, rank)}", rids=(Rid(rid),))
            )
            continue
        slots = (ours.working_slot, *ours.ping_pong, theirs.working_slot, *theirs.ping_pong)
        found.append(
            Violation(
                check=TP_AGREE,
                step=step,
                reason=f"request {rid} differs on rank {rank}: {_differences(ours, theirs)}",
                rids=(Rid(rid),),
                slots=tuple(dict.fromkeys(SlotId(s) for s in slots if s >= 0)),
            )
        )
    return found


def _slots(step: Step, reference: CacheState, other: CacheState, rank: int) -> list[Violation]:
    found = []
    for slot in sorted(reference.slots.keys() | other.slots.keys()):
        ours, theirs = reference.slots.get(slot, []), other.slots.get(slot, [])
        if ours != theirs:
            found.append(
                Violation(
                    check=TP_AGREE,
                    step=step,
                    reason=f"rank {rank} disagrees with rank 0 on slot {slot}: {_claims(theirs)} there, {_claims(ours)} on rank 0",
                    slots=(SlotId(slot),),
                    nodes=tuple(dict.fromkeys(NodeId(c.node) for c in [*ours, *theirs] if c.node >= 0)),
                    rids=tuple(dict.fromkeys(Rid(c.rid) for c in [*ours, *theirs] if c.rid)),
                )
            )
    return found


def _nodes(step: Step, reference: CacheState, other: CacheState, rank: int) -> list[Violation]:
    found = []
    for node in sorted(reference.nodes.keys() | other.nodes.keys()):
        ours, theirs = reference.nodes.get(node), other.nodes.get(node)
        if ours is None or theirs is None:
            found.append(
                Violation(check=TP_AGREE, step=step, reason=f"node {node} exists on {_only_on(theirs, rank)}", nodes=(NodeId(node),))
            )
        elif detail := _differences(ours, theirs, ignored=RANK_LOCAL_NODE_FIELDS):
            found.append(
                Violation(check=TP_AGREE, step=step, reason=f"node {node} differs on rank {rank}: {detail}", nodes=(NodeId(node),))
            )
    return found


def _only_on(theirs: object | None, rank: int) -> str:
    """Where a record that one rank lacks exists (`theirs`: rank `rank`'s, None if it lacks it)."""
    return "rank 0 only" if theirs is None else f"rank {rank} only"


def _differences(ours: msgspec.Struct, theirs: msgspec.Struct, ignored: tuple[str, ...] = ()) -> str:
    """The first fields (up to 3) in which rank r's record differs from rank 0's; "" if none."""
    fields = [f for f in ours.__struct_fields__ if f not in ignored and getattr(ours, f) != getattr(theirs, f)]
    return ", ".join(f"{f} {getattr(theirs, f)!r} there, {getattr(ours, f)!r} on rank 0" for f in fields[:3])


def _claims(claims: list) -> str:
    if not claims:
        return "free"
    return ", ".join(f"{c.kind}" + (f" node {c.node}" if c.node >= 0 else "") + (f" request {c.rid}" if c.rid else "") for c in claims)
