"""Invariants 3, 5 and 7: where a cached state came from, who may still write it, and what a
copy-on-write reads.

All three replay the step's events in sglang's order over the per-slot ledger, so they see the
slot as it was at each event: its last allocation, the last write planned into it, its tree
owner. Where the history does not reach back far enough to know (the allocation predates it),
they stay silent rather than guess.
"""

from __future__ import annotations

from ..schema import EvictEvent, InsertEvent, MatchEvent, RequestEvent, SlotClaim, SlotEvent, SlotId, TrackPlanEvent
from .history import StepView
from .ledger import Timeline, replay
from .slots import describe
from .violation import Violation, name_node

PROVENANCE = "provenance"
PLAN_SAFETY = "ping-pong-safety"
COW = "cow-source"


def check_provenance(view: StepView) -> list[Violation]:
    """Every inserted state was written for the inserting request after the slot's last
    allocation: the latest planned write into a donated ping-pong slot is that request's, and
    there is one (#30862, #24613, #31850); a state copied without extra_buffer comes from the
    request's working slot."""
    out: list[Violation] = []
    for event, timeline in replay(view.ledger, view.events):
        if not isinstance(event, InsertEvent):
            continue
        facts = timeline.facts(event.slot)
        ids = dict(nodes=(event.node,), slots=(event.slot,), rids=(event.rid,))
        where = f"slot {event.slot} cached at node {event.node} for request {event.rid}"
        if event.ping_pong_index >= 0:
            plan = facts.plan
            if plan is not None and plan.rid != event.rid:
                out.append(
                    Violation(
                        check=PROVENANCE,
                        step=view.step,
                        reason=f"{where} was last written for request {plan.rid} (planned at step {plan.step}, position {plan.position})",
                        **ids,
                    )
                )
            elif plan is None and facts.allocated_at is not None:
                out.append(
                    Violation(
                        check=PROVENANCE,
                        step=view.step,
                        reason=f"{where} was never written since its allocation at step {facts.allocated_at}",
                        **ids,
                    )
                )
            elif plan is None and view.ledger.known and not _was_ping_pong(view, event.slot, event.rid):
                out.append(
                    Violation(
                        check=PROVENANCE,
                        step=view.step,
                        reason=f"{where} was not a ping-pong slot of that request at the previous boundary ({_holders(view, event.slot)})",
                        **ids,
                    )
                )
        elif view.engine is not None and view.engine.strategy == "no_buffer":
            # no_buffer caches a fresh copy of the working slot (unfinished) or the working slot
            # itself (finished). Checked only when the strategy is known: int8 checkpoints also
            # insert without a ping-pong index, from a pool of their own.
            fresh = facts.allocated_at == view.step
            if not fresh and view.ledger.known and not _was_working(view, event.slot, event.rid):
                out.append(
                    Violation(
                        check=PROVENANCE,
                        step=view.step,
                        reason=f"{where} is neither a fresh copy nor that request's working slot ({_holders(view, event.slot)})",
                        **ids,
                    )
                )
    return out


def _previous_claims(view: StepView, slot: SlotId) -> list[SlotClaim]:
    return view.previous.slots.get(slot, []) if view.previous is not None else []


def _was_ping_pong(view: StepView, slot: SlotId, rid: str) -> bool:
    return any(c.kind == "ping_pong" and c.rid == rid for c in _previous_claims(view, slot))


def _was_working(view: StepView, slot: SlotId, rid: str) -> bool:
    return any(c.kind == "working" and c.rid == rid for c in _previous_claims(view, slot))


def _holders(view: StepView, slot: SlotId) -> str:
    claims = _previous_claims(view, slot)
    return "held by " + " and ".join(describe(c) for c in claims) if claims else "not in the census"


def check_plan_safety(view: StepView) -> list[Violation]:
    """No forward is planned to write into a slot a tree node owns: the donated slot left the
    request's ping-pong buffer before the next track plan (#24954, #24221).

    Tolerated on purpose: under overlap scheduling a chunked request donates the slot that the
    still-running forward of its previous chunk is writing (planned in an earlier step, before
    the donation); that write is the donated state itself, and state-depth checks its position."""
    out: list[Violation] = []
    for event, timeline in replay(view.ledger, view.events):
        if not isinstance(event, TrackPlanEvent):
            continue
        owner = timeline.facts(event.slot).owner
        if owner is not None and timeline.owner_known(event.slot):
            since = timeline.facts(event.slot).owner_since
            out.append(
                Violation(
                    check=PLAN_SAFETY,
                    step=view.step,
                    nodes=(owner,) if owner >= 0 else (),
                    slots=(event.slot,),
                    rids=(event.rid,),
                    reason=f"request {event.rid}'s state at position {event.position} is planned into slot {event.slot}, which {name_node(owner)} has cached since step {since}",
                )
            )
    return out


def check_cow(view: StepView) -> list[Violation]:
    """A copy-on-write reads a tree-owned state of the matched node, which stays cached until
    the request is admitted and the copy collected (#35821), and never copies a slot onto itself."""
    out: list[Violation] = []
    pending: dict[str, MatchEvent] = {}
    """Matches whose copy has not been collected: prepare_for_extend collects it right after
    the request's admit event."""
    freed: dict[str, tuple[MatchEvent, str]] = {}
    """Pending sources that were freed: a violation only if the request is admitted after (a
    rejected match is dropped by sglang, and its source may then be evicted)."""
    for event, timeline in replay(view.ledger, view.events):
        if isinstance(event, MatchEvent) and event.rid and event.cow_source > 0:
            pending[event.rid] = event
            freed.pop(event.rid, None)
            out += _matched_source(view, event, timeline)
        elif isinstance(event, EvictEvent) or (isinstance(event, SlotEvent) and not event.allocated):
            what = "evicted" if isinstance(event, EvictEvent) else "freed"
            gone = set(event.slots)
            freed.update((rid, (match, what)) for rid, match in pending.items() if match.cow_source in gone)
        elif isinstance(event, RequestEvent) and event.what == "admit":
            pending.pop(event.rid, None)
            if event.rid in freed:
                match, what = freed.pop(event.rid)
                out.append(
                    Violation(
                        check=COW,
                        step=view.step,
                        nodes=(match.node,),
                        slots=(match.cow_source,),
                        rids=(match.rid,),
                        reason=f"request {match.rid} was admitted to copy slot {match.cow_source} (node {match.node}'s state), which was {what} after the match",
                    )
                )
    owners = view.tree_owners
    for request in view.changed_requests:
        source = request.cow_source
        if source <= 0:
            continue
        ids = dict(slots=(source,), rids=(request.rid,))
        if source == request.working_slot:
            out.append(
                Violation(
                    check=COW,
                    step=view.step,
                    reason=f"request {request.rid} copies slot {source} onto itself (copy-on-write source == working slot)",
                    **ids,
                )
            )
        elif source not in owners:
            out.append(
                Violation(
                    check=COW,
                    step=view.step,
                    reason=f"request {request.rid}'s pending copy-on-write source slot {source} is not tree-owned",
                    **ids,
                )
            )
        elif view.detailed and (node := view.state.nodes.get(owners[source])) is not None and node.full_lock == 0:
            # Admission locks the matched node before the copy is collected; SKIP_DECODE_LOCK
            # and lazy mode drop only MAMBA locks, and only after the copy, so FULL stays > 0.
            out.append(
                Violation(
                    check=COW,
                    step=view.step,
                    nodes=(node.id,),
                    reason=f"request {request.rid}'s pending copy-on-write source slot {source} belongs to node {node.id}, which no lock protects",
                    **ids,
                )
            )
    return out


def _matched_source(view: StepView, event: MatchEvent, timeline: Timeline) -> list[Violation]:
    ids = dict(nodes=(event.node,), slots=(event.cow_source,), rids=(event.rid,))
    step, source = view.step, event.cow_source
    node = view.find_node(event.node)
    if node is not None and node.parent >= 0 and node.key_len == 0:
        return [
            Violation(
                check=COW,
                step=step,
                reason=f"request {event.rid} copies its state from node {event.node}, a ghost node with an empty key",
                **ids,
            )
        ]
    if not timeline.owner_known(source):
        return []  # the history does not reach the slot's insert: nothing to compare with
    owner = timeline.facts(source).owner
    if owner is None:
        return [
            Violation(
                check=COW,
                step=step,
                reason=f"request {event.rid} copies slot {source} as node {event.node}'s state, but no tree node owns it",
                **ids,
            )
        ]
    if owner >= 0 and owner != event.node:
        return [
            Violation(
                check=COW,
                step=step,
                reason=f"request {event.rid} copies slot {source} as node {event.node}'s state, but it is node {owner}'s",
                **ids,
            )
        ]
    return []
