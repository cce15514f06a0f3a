"""Check T3 from the engine's CowEvents: after a copy-on-write the working slot holds exactly
its source's state, and a cleared slot reads all zeros, both seen right after the deferred copy
ran and before the forward extended the slot (engine_hooks/cow_hooks.py)."""

from __future__ import annotations

from ..schema import CowEvent
from .content import hex_fingerprint
from .history import StepView
from .violation import Violation

COW_COPY = "cow-copy"


def check_cow_copy(view: StepView) -> list[Violation]:
    out: list[Violation] = []
    for event in view.events:
        if not isinstance(event, CowEvent):
            continue
        pairs = zip(event.sources, event.destinations, event.source_fingerprints, event.destination_fingerprints)
        for source, destination, source_print, destination_print in pairs:
            if source_print != destination_print:
                out.append(
                    Violation(
                        check=COW_COPY,
                        step=view.step,
                        slots=(destination, source),
                        reason=f"working slot {destination} differs from its copy-on-write source {source} right after "
                        f"the copy: fingerprint {hex_fingerprint(destination_print)}, source {hex_fingerprint(source_print)}",
                    )
                )
        for slot, zero in zip(event.cleared, event.cleared_zero):
            if not zero:
                out.append(
                    Violation(
                        check=COW_COPY,
                        step=view.step,
                        slots=(slot,),
                        reason=f"slot {slot} was cleared for a fresh request but is not all zeros",
                    )
                )
    return out
