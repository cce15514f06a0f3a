"""Invariants 1 and 2: every mamba slot has exactly one owner, and each live request holds the
slots its `req.kv` fields say, in the shape its strategy gives them.

Both look only at what changed since the previous boundary (slots whose claims changed,
requests whose record changed), so a broken invariant is reported at the step it appears.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..schema import NodeId, RequestRecord, SlotClaim, SlotId
from .history import StepView
from .violation import Violation, name_node

PARTITION = "slot-partition"
REQUEST_SLOTS = "request-slots"

_REFERENCE = "cow_source"
"""A pending copy-on-write names its source slot, which a tree node owns: a reference, not an
owner (the adapter lists it as a claim so views can show it)."""
SESSION_PREFIX = "session:"
"""Claims of a streaming session's kept record carry the pseudo rid `session:<sid>`."""


def describe(claim: SlotClaim) -> str:
    """A claim as a person reads it: "node 42 (tree)", "request r3 (ping-pong 1)"."""
    if claim.kind == "tree":
        return f"{name_node(claim.node)} (tree)"
    if claim.kind == "working":
        return f"request {claim.rid} (working)"
    if claim.kind == "ping_pong":
        return f"request {claim.rid} (ping-pong {claim.ping_pong_index})"
    if claim.kind == "cow_source":
        return f"request {claim.rid} (copy-on-write source)"
    if claim.kind == "admission":
        return "an admission group (pre-allocated)"
    return "the free list" if claim.kind == "free" else "nothing"


def _listing(claims: list[SlotClaim]) -> str:
    parts = [describe(claim) for claim in claims]
    return " and by ".join(parts)


def owners(claims: list[SlotClaim]) -> list[SlotClaim]:
    """The claims that own a slot: references dropped, and a session's claim dropped where a
    request claims the same entry (a streaming turn runs on its session's record, `slot.kv is
    req.kv`, so the adapter lists that one holder twice)."""
    owning = [claim for claim in claims if claim.kind != _REFERENCE]
    by_request = {(c.kind, c.ping_pong_index) for c in owning if c.rid and not c.rid.startswith(SESSION_PREFIX)}
    return [c for c in owning if not (c.rid.startswith(SESSION_PREFIX) and (c.kind, c.ping_pong_index) in by_request)]


def check_partition(view: StepView) -> list[Violation]:
    """Free list, tree values, working slots, ping-pong entries and admission pre-allocations
    partition the slots 1..size: one owner per slot, none on slot 0, no slot outside the pool."""
    state, step = view.state, view.step
    out: list[Violation] = []
    for slot in view.changed_slots:
        claims = state.slots[slot]
        owning = owners(claims)
        ids = dict(nodes=tuple(c.node for c in owning if c.node >= 0), rids=tuple(dict.fromkeys(c.rid for c in claims if c.rid)))
        if slot == 0 and any(claim.kind != "free" for claim in claims):
            out.append(
                Violation(
                    check=PARTITION,
                    step=step,
                    slots=(slot,),
                    reason=f"slot 0 (sglang's dummy slot) is claimed by {_listing(claims)}",
                    **ids,
                )
            )
        # A finished request's claims still count as owners: sglang frees its slots when it
        # processes the batch, which under overlap may come a step after the finish is known.
        elif len(owning) > 1:
            out.append(Violation(check=PARTITION, step=step, slots=(slot,), reason=f"slot {slot} is owned by {_listing(owning)}", **ids))
        elif not owning or owning[0].kind == "unaccounted":
            # Capture runs outside admission groups and lists every holder sglang has (batches,
            # queues, sessions), so a slot nothing holds at a boundary has leaked.
            references = [claim for claim in claims if claim.kind == _REFERENCE]
            held = f" (only referenced by {_listing(references)})" if references else ""
            out.append(
                Violation(check=PARTITION, step=step, slots=(slot,), reason=f"slot {slot} leaked: neither free nor owned{held}", **ids)
            )
    size = len(state.slots) - (0 in state.slots)
    for node in view.changed_nodes:
        if node.mamba_slot >= 0 and node.mamba_slot not in state.slots:
            out.append(
                Violation(
                    check=PARTITION,
                    step=step,
                    nodes=(node.id,),
                    slots=(node.mamba_slot,),
                    reason=f"node {node.id} holds slot {node.mamba_slot}, {_outside(node.mamba_slot, size)}",
                )
            )
    for request in view.changed_requests:
        for what, slot in _request_slots(request):
            if slot not in state.slots:
                out.append(
                    Violation(
                        check=PARTITION,
                        step=step,
                        rids=(request.rid,),
                        slots=(slot,),
                        reason=f"request {request.rid} {what} is slot {slot}, {_outside(slot, size)}",
                    )
                )
    return out


def _outside(slot: SlotId, size: int) -> str:
    if slot == 0:
        return "sglang's dummy slot"
    return f"outside the pool 1..{size}"


def _request_slots(request: RequestRecord) -> Iterable[tuple[str, SlotId]]:
    """(what, slot) for each slot id a request's fields name (empty entries excluded)."""
    if request.working_slot >= 0:
        yield "working slot", request.working_slot
    for index, slot in enumerate(request.ping_pong):
        if slot >= 0:
            yield f"ping-pong {index}", slot
    if request.cow_source >= 0:
        yield "copy-on-write source", request.cow_source


def check_request_slots(view: StepView) -> list[Violation]:
    """Each live request holds a working slot and, under extra_buffer, a well-formed ping-pong
    buffer whose last-tracked entry (the one a donation takes) is a real slot."""
    step, engine = view.step, view.engine
    strategy = engine.strategy if engine is not None else None
    lazy, eager = strategy == "extra_buffer_lazy", strategy == "extra_buffer"
    live = view.live
    out: list[Violation] = []

    def flag(request: RequestRecord, reason: str, *slots: SlotId) -> None:
        out.append(
            Violation(
                check=REQUEST_SLOTS, step=step, rids=(request.rid,), slots=slots, reason=f"request {request.rid} ({request.state}) {reason}"
            )
        )

    for request in view.changed_requests:
        if request.rid not in live:
            continue
        if request.working_slot <= 0:
            flag(request, f"holds no working slot (working slot {request.working_slot})")
        _check_mirrors(request, view.tree_owners, flag)
        buffer, empty = request.ping_pong, request.ping_pong_empty
        if not buffer:
            if eager or lazy:
                flag(request, f"holds no ping-pong buffer under {strategy}")
            continue
        if engine is not None and (eager or lazy) and len(buffer) != (2 if engine.overlap else 1):
            # get_mamba_tracking_slots: 2 entries with overlap scheduling, 1 without (lazy too).
            flag(request, f"has {len(buffer)} ping-pong entries, expected {2 if engine.overlap else 1} (overlap={engine.overlap})", *buffer)
        for index, slot in enumerate(buffer):
            is_empty = empty[index] if index < len(empty) else slot < 0
            if is_empty != (slot < 0):
                flag(request, f"ping-pong {index} is slot {slot} but marked {'empty' if is_empty else 'in use'}", slot)
            elif is_empty and eager:
                # Only lazy mode frees an entry of a running request (the one it stops tracking).
                flag(request, f"ping-pong {index} is empty under extra_buffer", slot)
        for name, index in (("next", request.next_track_idx), ("last", request.last_track_idx)):
            if not 0 <= index < len(buffer):
                flag(request, f"{name}_track_idx {index} is outside its {len(buffer)} ping-pong entries", *buffer)
        last = request.last_track_idx
        if request.last_track_seqlen >= 0 and 0 <= last < len(buffer) and buffer[last] < 0:
            flag(
                request,
                f"tracked a state at {request.last_track_seqlen} into ping-pong {last}, which is empty: a donation would cache slot -1",
            )
    return out


def _check_mirrors(request: RequestRecord, tree_owners: dict[SlotId, NodeId], flag: Callable[..., None]) -> None:
    """The device mirrors (what the forward writes and free_mamba_cache frees) name the slots
    the request's record holds (#24221: a donated slot left in the ping-pong mirror)."""
    if request.working_mirror >= 0 and request.working_slot > 0 and request.working_mirror != request.working_slot:
        flag(
            request,
            f"holds working slot {request.working_slot} but the device mirror names slot {request.working_mirror}",
            request.working_mirror,
        )
    mirror = request.ping_pong_mirror
    if not mirror or len(mirror) != len(request.ping_pong):
        return
    for index, (held, mirrored) in enumerate(zip(request.ping_pong, mirror)):
        if held != mirrored:
            owner = tree_owners.get(mirrored)
            cached = f", which {name_node(owner)} has cached" if owner is not None else ""
            flag(
                request,
                f"holds slot {held} as ping-pong {index} but the device mirror the forward tracks into names slot {mirrored}{cached}",
                mirrored,
                held,
            )
