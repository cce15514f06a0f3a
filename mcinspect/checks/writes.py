"""What the forward ran, against what the scheduler planned and what the tree was given:
track writes (TrackWriteEvent, engine_hooks/write_hooks.py) and deferred copy-on-writes
(CowEvent, engine_hooks/cow_hooks.py).

Metadata only: these fire at the step of the faulty action, with no recompute and no tolerance.
A whole family of upstream bugs planned a write, never ran it (or ran it into another slot) and
donated the slot anyway: #32555, #31099/#32606, #30862, #24613/#39342, #34184, #24954.
"""

from __future__ import annotations

from ..schema import CowEvent, InsertEvent, MatchEvent, RequestEvent, SlotClaim, SlotId, TrackPlanEvent, TrackWriteEvent
from .history import StepView
from .ledger import replay
from .slots import describe
from .violation import Violation, name_node

WRITE_RAN = "write-ran"
WRITE_TARGET = "write-target"
COW_RAN = "cow-ran"

DUMMY_SLOT = SlotId(0)
"""sglang's padding slot: padded rows of a graph-replayed batch write it by design."""


def check_write_ran(view: StepView) -> list[Violation]:
    """Every planned track write ran, and every slot donated to the tree was written by a forward
    for the inserting request at the position its node is labelled with.

    At the forward's step: a plan whose row the copy was handed but into another slot (#32555),
    or an extend plan whose forward ran (its CowEvent) with no track copy for it at all (#24613,
    #30862). At the donation (an extra_buffer InsertEvent): the slot's latest write since its
    allocation is the inserting request's, for the node's position."""
    reported = view.engine.track_writes if view.engine is not None else ""
    if not reported:
        return []  # the engine reports no track writes: absence would prove nothing
    out = _plans_not_run(view, reported)
    for event, timeline in replay(view.ledger, view.events):
        if not isinstance(event, InsertEvent) or event.ping_pong_index < 0:
            continue
        facts = timeline.facts(event.slot)
        write = facts.write
        if reported == "extend" and write is None and facts.plan is not None and facts.plan.forward == "decode":
            continue  # planned for a decode step replayed from a CUDA graph: its copy is not seen
        where = f"slot {event.slot} donated to node {event.node} for request {event.rid} at position {event.seqlen}"
        ids = dict(nodes=(event.node,), slots=(event.slot,), rids=(event.rid,))
        if write is None:
            known = facts.allocated_at is not None or facts.plan is not None
            if known:
                planned = f" (planned at step {facts.plan.step}, position {facts.plan.position})" if facts.plan is not None else ""
                since = f" since its allocation at step {facts.allocated_at}" if facts.allocated_at is not None else ""
                out.append(
                    Violation(check=WRITE_RAN, step=view.step, reason=f"{where} was never written by a forward{since}{planned}", **ids)
                )
        elif write.rid != event.rid:
            whose = f"request {write.rid}'s state" if write.rid else "a write no request of its batch planned"
            out.append(Violation(check=WRITE_RAN, step=view.step, reason=f"{where} last received {whose} (step {write.step})", **ids))
        elif write.position != event.seqlen:
            out.append(
                Violation(
                    check=WRITE_RAN,
                    step=view.step,
                    reason=f"{where} holds the state its forward wrote for position {write.position} (step {write.step})",
                    **ids,
                )
            )
    return out


def _plans_not_run(view: StepView, reported: str) -> list[Violation]:
    out: list[Violation] = []
    pending: dict[tuple[str, SlotId], TrackPlanEvent] = {}
    forward_ran: set[tuple[str, SlotId]] = set()
    """Extend plans made before a CowEvent: their forward has run its deferred copies."""
    for event in view.events:
        if isinstance(event, TrackPlanEvent) and event.forward in ("extend", "decode"):
            if event.forward == "extend" or reported == "all":
                pending[(event.rid, event.slot)] = event
        elif isinstance(event, CowEvent):
            forward_ran |= {key for key, plan in pending.items() if plan.forward == "extend"}
        elif isinstance(event, TrackWriteEvent):
            written = set(event.written_slots())
            for rid, on, slot in zip(event.rids, event.mask, event.planned):
                plan = pending.pop((rid, slot), None)
                forward_ran.discard((rid, slot))
                if plan is None:
                    continue
                if not on:
                    what = "its track copy was not told to track that row"
                elif slot not in written:
                    what = f"its track copy wrote {', '.join(map(str, sorted(written))) or 'no slot'}"
                else:
                    continue
                out.append(
                    Violation(
                        check=WRITE_RAN,
                        step=view.step,
                        slots=(slot,),
                        rids=(rid,),
                        reason=f"the {event.forward} forward was to write request {rid}'s state at position {plan.position} into slot {slot}, but {what}",
                    )
                )
    for key in forward_ran:
        plan = pending[key]
        out.append(
            Violation(
                check=WRITE_RAN,
                step=view.step,
                slots=(plan.slot,),
                rids=(plan.rid,),
                reason=f"request {plan.rid}'s extend forward ran (its deferred copies did) but no track copy wrote its state at position {plan.position} into slot {plan.slot}",
            )
        )
    return out


def check_write_target(view: StepView) -> list[Violation]:
    """No track write a forward ran lands in a slot the tree owns, a free slot, another request's
    slot, or a slot no row of its batch planned (the padding slot 0 aside). Whose slot it was
    is judged only with the previous boundary known: after a gap (a step that went unobserved)
    a request that wrote its ping-pong slot and donated it at its finish in the same step no
    longer shows the slot (an MRC 0.5.15 demo in CI showed two such false alarms)."""
    out: list[Violation] = []
    for event, timeline in replay(view.ledger, view.events):
        if not isinstance(event, TrackWriteEvent):
            continue
        planned = {slot: rid for rid, on, slot in zip(event.rids, event.mask, event.planned) if on}
        for slot in dict.fromkeys(event.written_slots()):
            if slot == DUMMY_SLOT:
                continue
            rid = planned.get(slot)
            ids = dict(slots=(slot,), rids=(rid,) if rid else ())
            facts = timeline.facts(slot)
            if facts.owner is not None and timeline.owner_known(slot):
                owner = facts.owner
                out.append(
                    Violation(
                        check=WRITE_TARGET,
                        step=view.step,
                        nodes=(owner,) if owner >= 0 else (),
                        reason=f"the {event.forward} forward wrote a state into slot {slot}, which {name_node(owner)} has cached since step {facts.owner_since}",
                        **ids,
                    )
                )
            elif rid is None:
                out.append(
                    Violation(
                        check=WRITE_TARGET,
                        step=view.step,
                        reason=f"the {event.forward} forward wrote a state into slot {slot}, which no request of its batch planned ({_holders(view, slot)})",
                        **ids,
                    )
                )
            elif rid and view.previous is not None and facts.allocated_at != view.step and not _claimed_by(view, slot, rid):
                out.append(
                    Violation(
                        check=WRITE_TARGET,
                        step=view.step,
                        reason=f"the {event.forward} forward wrote request {rid}'s state into slot {slot}, which is not that request's ({_holders(view, slot)})",
                        **ids,
                    )
                )
    return out


def check_cow_ran(view: StepView) -> list[Violation]:
    """Every copy-on-write the scheduler recorded for an admitted request ran in the forward
    that first extends it: the first CowEvent after the admission (a forward's deferred copies
    and clears) copies the matched slot into the request's working slot."""
    out: list[Violation] = []
    pending: dict[str, MatchEvent] = {}
    admitted: list[MatchEvent] = []
    for event in view.events:
        if isinstance(event, MatchEvent) and event.rid and event.cow_source > 0:
            pending[event.rid] = event
        elif isinstance(event, RequestEvent) and event.what == "admit" and event.rid in pending:
            admitted.append(pending.pop(event.rid))
        elif isinstance(event, CowEvent) and admitted:
            copies = set(zip(event.sources, event.destinations))
            for match in admitted:
                request = view.state.requests.get(match.rid)
                working = request.working_slot if request is not None else None
                ran = any(source == match.cow_source and (working is None or dest == working) for source, dest in copies)
                if not ran:
                    into = f" into its working slot {working}" if working is not None else ""
                    out.append(
                        Violation(
                            check=COW_RAN,
                            step=view.step,
                            nodes=(match.node,),
                            slots=(match.cow_source,),
                            rids=(match.rid,),
                            reason=f"request {match.rid} was admitted to copy slot {match.cow_source} (node {match.node}'s state){into}, but its forward ran no such copy",
                        )
                    )
            admitted = []
    return out


def _claims(view: StepView, slot: SlotId) -> list[SlotClaim]:
    claims = list(view.state.slots.get(slot, []))
    if view.previous is not None:
        claims += view.previous.slots.get(slot, [])
    return claims


def _claimed_by(view: StepView, slot: SlotId, rid: str) -> bool:
    """The slot was one of the request's slots at this boundary or the previous one."""
    return any(c.rid == rid and c.kind in ("ping_pong", "working") for c in _claims(view, slot))


def _holders(view: StepView, slot: SlotId) -> str:
    claims = _claims(view, slot)
    return "held by " + " and ".join(dict.fromkeys(describe(c) for c in claims)) if claims else "not in the census"
