"""T2 from recompute distances: a cached state equals the state of its node's prefix run alone.

This is how #37836 (#31833, #33450) is caught: the state of another token position was cached
while slot ids, seqlens and depths were right, so no metadata check fires. The engine measures
the distances (engine_hooks/verify.py, embedded CPU engine with `--verify`): per component,
the relative L2 distance between the slot and transformers' recompute of the owning node's
prefix (`SlotContent.recompute_conv_rel_l2`, `.recompute_temporal_rel_l2`; -1 when not
verified). Two implementations of the same bf16 model round differently, so equality holds
only up to a tolerance calibrated on clean runs (tests/bench/calibrate_t2.py).
"""

from __future__ import annotations

import math

from ..schema import SlotContent
from .history import StepView
from .violation import Violation

RECOMPUTE = "T2-recompute"

TOLERANCE_REL_L2 = 0.03
"""Largest relative L2 distance (either component) still read as the same state. Measured with
tests/bench/calibrate_t2.py (40 requests a run): clean runs (extra_buffer page 16 and 1,
no_buffer page 1; 159 slots) reach at most 0.0066 (temporal) and 0.0027 (conv); the
wrong-chunk-state fault (#37836) puts its faulty slots at 1.0 (temporal). 0.05 leaves 7.5x
above the clean maximum and 20x below the faulty minimum."""


def check_recompute(view: StepView) -> list[Violation]:
    """Each verified record new at this boundary (not in the previous state): a component
    farther than the tolerance from the recompute, or a NaN distance, is a violation."""
    previous = view.previous.contents if view.previous is not None else {}
    owners = view.tree_owners
    out: list[Violation] = []
    for slot, now in view.state.contents.items():
        worst = _worst(now)
        if worst is None or previous.get(slot) == now:
            continue  # not verified, or reported when first seen
        if math.isnan(worst[1]) or worst[1] > TOLERANCE_REL_L2:
            node = owners.get(slot)
            holder = f"node {node}" if node is not None and node >= 0 else "a tree node"
            out.append(
                Violation(
                    check=RECOMPUTE,
                    step=view.step,
                    nodes=(node,) if node is not None and node >= 0 else (),
                    slots=(slot,),
                    reason=f"slot {slot} cached at {holder} differs from its prefix recomputed: {worst[0]} "
                    f"relative L2 {worst[1]:.3g} > {TOLERANCE_REL_L2:g}",
                )
            )
    return out


def _worst(content: SlotContent) -> tuple[str, float] | None:
    """The component farthest from the recompute (NaN first); None when not verified."""
    pairs = [("conv", content.recompute_conv_rel_l2), ("temporal", content.recompute_temporal_rel_l2)]
    measured = [(name, value) for name, value in pairs if value != -1.0]
    if not measured:
        return None
    return max(measured, key=lambda pair: math.inf if math.isnan(pair[1]) else pair[1])
