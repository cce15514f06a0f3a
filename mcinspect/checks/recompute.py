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

TOLERANCE_REL_L2 = 0.035
"""Largest relative L2 distance of the temporal (SSM) state still read as the same state.
Measured with tests/bench/calibrate_t2.py: clean runs of every family (Qwen3-Next, NemotronH,
Qwen3.5; 200 requests under each of extra_buffer p16 / p1, no_buffer p1, extra_buffer_lazy
p16) reach at most 0.012 (gated delta net; NemotronH 0.007); the faulty states of
wrong-chunk-state (#37836) and zero-initial-state (#29368) start at 0.23. The tiny models
remember: a zeroed or another prefix's state is still >= 0.39 away 256 tokens later (11x)."""
CONV_TOLERANCE_REL_L2 = 0.1
"""The same for the conv window: the last kernel - 1 inputs, rounded to bf16 by two
implementations, where one flipped expert of Qwen3-Next's MoE changes a whole input (clean
maximum 0.023). It holds only the last few tokens, so a fault shows in the temporal state."""


def check_recompute(view: StepView) -> list[Violation]:
    """Each verified record new at this boundary (not in the previous state): a component
    farther than its tolerance from the recompute, or a NaN distance, is a violation."""
    previous = view.previous.contents if view.previous is not None else {}
    owners = view.tree_owners
    out: list[Violation] = []
    for slot, now in view.state.contents.items():
        if previous.get(slot) == now:
            continue  # reported when first seen
        excess = _excess(now)
        if excess is None:
            continue  # not verified, or within the tolerances
        component, distance, tolerance = excess
        node = owners.get(slot)
        holder = f"node {node}" if node is not None and node >= 0 else "a tree node"
        out.append(
            Violation(
                check=RECOMPUTE,
                step=view.step,
                nodes=(node,) if node is not None and node >= 0 else (),
                slots=(slot,),
                reason=f"slot {slot} cached at {holder} differs from its prefix recomputed: {component} "
                f"relative L2 {distance:.3g} > {tolerance:g}",
            )
        )
    return out


def _excess(content: SlotContent) -> tuple[str, float, float] | None:
    """The component farthest beyond its tolerance (NaN first), with its distance and
    tolerance; None when not verified or within both tolerances."""
    pairs = [
        ("conv", content.recompute_conv_rel_l2, CONV_TOLERANCE_REL_L2),
        ("temporal", content.recompute_temporal_rel_l2, TOLERANCE_REL_L2),
    ]
    beyond = [pair for pair in pairs if pair[1] != -1.0 and (math.isnan(pair[1]) or pair[1] > pair[2])]
    if not beyond:
        return None
    return max(beyond, key=lambda pair: math.inf if math.isnan(pair[1]) else pair[1] / pair[2])
