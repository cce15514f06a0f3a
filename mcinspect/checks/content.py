"""Content check T1 from slot fingerprints: a cached state never changes while its node holds
it, is never all zeros, and no slot in use holds NaN/Inf.

This is the check that sees what metadata cannot: a state overwritten in place while cached
(#24221, a plan into a donated slot racing under overlap #24954), a slot cached but never
written (#30862: zero), a diverged model (NaN). Fingerprints come with the state
(`CacheState.contents`), taken by the engine after the producing forward finished.

T2 (the state at a node equals the state of its prefix run alone: how #37836 is caught) needs a
recompute (recompute.py); T3 (after a copy-on-write the working slot equals its source; after a
clear it is zero) needs fingerprints taken when the deferred copy runs (cow_copy.py).
"""

from __future__ import annotations

from .history import StepView
from .violation import Violation, name_node

CONTENT = "content-immutable"


def check_content(view: StepView) -> list[Violation]:
    """Each fingerprint taken at this boundary: against the last one taken while the same node
    held the slot, and for NaN/Inf and zeros. Older fingerprints were checked when taken."""
    state, step = view.state, view.step
    owners = view.tree_owners
    moved = view.end.moved
    ledger = view.ledger
    out: list[Violation] = []
    # A snapshot alone: every fingerprint it carries is news.
    for slot in view.fingerprinted if view.previous is not None else list(state.contents):
        now = state.contents[slot]
        node = owners.get(slot)
        before = ledger.get(slot)
        # Compared only while the same node held the slot since the last fingerprint: no insert,
        # eviction or free of it in this step, and the previous boundary agrees.
        same_owner = ledger.known and node is not None and slot not in moved and before.owner == node
        if same_owner and before.content is not None and now.step > before.content.step and now.fingerprint != before.content.fingerprint:
            out.append(
                Violation(
                    check=CONTENT,
                    step=step,
                    nodes=(node,) if node >= 0 else (),
                    slots=(slot,),
                    reason=f"slot {slot} changed while {name_node(node)} held it: fingerprint {hex_fingerprint(before.content.fingerprint)} at step {before.content.step}, {hex_fingerprint(now.fingerprint)} at step {now.step}",
                )
            )
        claims = state.slots.get(slot, ())
        # A free slot keeps whatever its last owner left; a NaN there was reported while owned.
        if now.nonfinite > 0 and not all(claim.kind == "free" for claim in claims):
            holders = ", ".join(claim.kind for claim in claims)
            out.append(
                Violation(check=CONTENT, step=step, slots=(slot,), reason=f"slot {slot} ({holders}) holds {now.nonfinite} NaN/Inf values")
            )
        if now.zero and node is not None:
            # A state after one token or more is never all zeros: the cached slot was never written.
            out.append(
                Violation(
                    check=CONTENT,
                    step=step,
                    nodes=(node,) if node >= 0 else (),
                    slots=(slot,),
                    reason=f"slot {slot} cached at {name_node(node)} is all zeros: it was never written",
                )
            )
    return out


def hex_fingerprint(fingerprint: int) -> str:
    """The 64-bit fingerprint as 16 hex digits (the kernels hand it over as a signed int64)."""
    return f"{fingerprint & 0xFFFF_FFFF_FFFF_FFFF:016x}"
