"""T2 for running requests: a request's working state equals its whole prefix recomputed alone.

A lost copy-on-write into the working slot, or a kernel that ignores the initial state after a
prefix hit (#29368, #24954), corrupts that request's output without ever caching a wrong state:
every cached state verifies clean. The engine samples running requests at step boundaries with
no forward in flight and compares the working slot with the request's tokens so far (cached part
and computed suffix) prefilled alone (`WorkingStateEvent`, engine_hooks/verifier.py).
"""

from __future__ import annotations

from ..schema import WorkingStateEvent
from .history import StepView
from .recompute import beyond
from .violation import Violation

WORKING = "T2-working-state"


def check_working_state(view: StepView) -> list[Violation]:
    """Each of the step's working-state comparisons farther than its oracle's tolerance."""
    out: list[Violation] = []
    for event in view.events:
        if not isinstance(event, WorkingStateEvent):
            continue
        excess = beyond(event.oracle, event.forward, event.conv_rel_l2, event.temporal_rel_l2)
        if excess is not None:
            component, distance, limit = excess
            hit = f"after a {event.prefix_len}-token prefix hit" if event.prefix_len > 0 else "with no prefix hit"
            out.append(
                Violation(
                    check=WORKING,
                    step=view.step,
                    slots=(event.slot,),
                    rids=(event.rid,),
                    reason=f"request {event.rid}'s working slot {event.slot} ({hit}) differs from its {event.seqlen} "
                    f"tokens recomputed by the {event.oracle} oracle: {component} relative L2 {distance:.3g} > {limit:g}",
                )
            )
    return out
