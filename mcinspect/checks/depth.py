"""Invariant 4: a cached mamba state sits at the depth it was computed for.

The state's depth is the position its producing write was planned for (`TrackPlanEvent`:
`mamba_last_track_seqlen` in prefill, the sequence length at a decode boundary); the node's
depth is where the key that holds it ends. They differ when the key was floored or truncated
after the state was tracked (#38815/#39209, DCP #34808), when a boundary was credited to the
wrong batch (#29792, #24590), or on a speculative overshoot (#35694).
"""

from __future__ import annotations

from ..schema import InsertEvent, MatchEvent
from .history import StepView
from .ledger import replay
from .tree import node_end
from .violation import Violation

DEPTH = "state-depth"


def check_depth(view: StepView) -> list[Violation]:
    """Inserted and matched states against their node's end depth, a node's end depth against
    its own past, and a request's tracked depth against the KV it holds."""
    state, step = view.state, view.step
    nodes = state.nodes
    out: list[Violation] = []
    for event, timeline in replay(view.ledger, view.events):
        if isinstance(event, InsertEvent):
            node = nodes.get(event.node)
            ids = dict(nodes=(event.node,), slots=(event.slot,), rids=(event.rid,))
            if node is not None and node_end(node) != event.seqlen:
                out.append(
                    Violation(
                        check=DEPTH,
                        step=step,
                        reason=f"request {event.rid} cached slot {event.slot} with a key of {event.seqlen} tokens at node {node.id}, which ends at depth {node_end(node)}",
                        **ids,
                    )
                )
            plan = timeline.facts(event.slot).plan
            # Donated states only: without extra_buffer nothing plans a write, the slot is a
            # copy of (or is) the working slot at the request's own length.
            if event.ping_pong_index >= 0 and plan is not None and plan.rid == event.rid and plan.position != event.seqlen:
                out.append(
                    Violation(
                        check=DEPTH,
                        step=step,
                        reason=f"slot {event.slot} holds request {event.rid}'s state at position {plan.position} (planned at step {plan.step}) but was cached at node {event.node} of depth {event.seqlen}",
                        **ids,
                    )
                )
        elif isinstance(event, MatchEvent) and event.cow_source > 0:
            node = view.find_node(event.node)
            if node is not None and node.parent >= 0 and node_end(node) != event.hit_len:
                out.append(
                    Violation(
                        check=DEPTH,
                        step=step,
                        nodes=(node.id,),
                        slots=(event.cow_source,),
                        rids=(event.rid,),
                        reason=f"request {event.rid} resumes at {event.hit_len} tokens from the state of node {node.id}, which ends at depth {node_end(node)}",
                    )
                )
    previous = view.previous
    if previous is not None:
        for node in view.changed_nodes:
            before = previous.nodes.get(node.id)
            if before is not None and node.mamba_slot >= 0 and before.mamba_slot == node.mamba_slot and node_end(before) != node_end(node):
                out.append(
                    Violation(
                        check=DEPTH,
                        step=step,
                        nodes=(node.id,),
                        slots=(node.mamba_slot,),
                        reason=f"node {node.id} holding slot {node.mamba_slot} moved its end from depth {node_end(before)} to {node_end(node)}",
                    )
                )
    live = view.live
    for request in view.changed_requests:
        if request.rid in live and request.last_track_seqlen > request.allocated_len:
            out.append(
                Violation(
                    check=DEPTH,
                    step=step,
                    rids=(request.rid,),
                    reason=f"request {request.rid} tracked a state at position {request.last_track_seqlen} but holds only {request.allocated_len} KV tokens",
                )
            )
    return out
