"""T2 from recompute distances: a cached state equals the state of its node's prefix run alone.

This is how #37836 (#31833, #33450) is caught: the state of another token position was cached
while slot ids, seqlens and depths were right, so no metadata check fires. The engine measures
the distances (engine_hooks/verifier.py): per component, the relative L2 distance between the
slot and a recompute of the owning node's prefix (`SlotContent.recompute_conv_rel_l2`,
`.recompute_temporal_rel_l2`; -1 when not verified), by the oracle `recompute_oracle` names:
- "engine": the engine's own forward pass, the prefix prefilled alone from an empty state. The
  same kernels on both sides: differences come only from where the state is read (a tracked
  chunk-boundary state vs a prefill's final state) and batch shape;
- "transformers": an independent implementation of the embedded engine's tiny model; two
  implementations of a bf16 model round differently.
Each oracle's tolerance is calibrated on clean runs (tests/bench/calibrate_t2.py).
"""

from __future__ import annotations

import math

from ..schema import BatchOrigin, SlotContent
from .history import StepView
from .violation import Violation, name_node

RECOMPUTE = "T2-recompute"

TOLERANCE_REL_L2 = {"engine": 0.01, "engine-decoded": 0.1, "transformers": 0.03}
"""Largest relative L2 distance (either component) still read as the same state, by oracle and,
for the engine oracle, by the forward that wrote the state. Calibrated with
tests/bench/calibrate_t2.py (README, "T2 verification": clean max, faulty min, margin):
- engine, a state a prefill wrote (tracked or final): clean states are bit-exact (0) where the
  cached state is a prefill's final state and within 0.002 where it is an intermediate chunk
  state (fp32 SSM state summed in another order); faulty states measure >= 1.
- engine-decoded, a state decode steps wrote (no_buffer's finished working slot, a decode-tracked
  checkpoint, a working state after decoding): the token-by-token recurrence against the
  reference's chunked prefill, and bf16 conv inputs from decode-shaped batches, reach 0.025.
- transformers: two implementations of a bf16 model (tests/bench/calibrate_t2.py --oracle
  transformers, per family: see its output in the README)."""


def tolerance(oracle: str, forward: str = "") -> float:
    """The tolerance of `oracle` for a state written by `forward` ("extend", "decode", "finish",
    or "" when not known: the looser engine bound). Oracle "" is a recording from before oracles
    were named: transformers."""
    if oracle == "engine":
        return TOLERANCE_REL_L2["engine" if forward == "extend" else "engine-decoded"]
    return TOLERANCE_REL_L2["transformers"]


def check_recompute(view: StepView) -> list[Violation]:
    """Each verified record new at this boundary (not in the previous state): a component
    farther than its oracle's tolerance from the recompute, or a NaN distance, is a violation."""
    previous = view.previous.contents if view.previous is not None else {}
    owners = view.tree_owners
    out: list[Violation] = []
    for slot, now in view.state.contents.items():
        worst = worst_component(now)
        if worst is None or previous.get(slot) == now:
            continue  # not verified, or reported when first seen
        limit = tolerance(now.recompute_oracle, now.origin.forward if now.origin is not None else "")
        if math.isnan(worst[1]) or worst[1] > limit:
            node = now.recompute_node if now.recompute_node >= 0 else owners.get(slot)
            holder = name_node(node) if node is not None else "a tree node"
            oracle = now.recompute_oracle or "transformers"
            out.append(
                Violation(
                    check=RECOMPUTE,
                    step=view.step,
                    nodes=(node,) if node is not None and node >= 0 else (),
                    slots=(slot,),
                    rids=(now.origin.rid,) if now.origin is not None and now.origin.rid else (),
                    reason=f"slot {slot} cached at {holder} differs from its prefix recomputed by the {oracle} "
                    f"oracle: {worst[0]} relative L2 {worst[1]:.3g} > {limit:g}{written_by(now.origin)}",
                )
            )
    return out


def worst_component(content: SlotContent) -> tuple[str, float] | None:
    """The component farthest from the recompute (NaN first); None when not verified."""
    pairs = [("conv", content.recompute_conv_rel_l2), ("temporal", content.recompute_temporal_rel_l2)]
    measured = [(name, value) for name, value in pairs if value != -1.0]
    if not measured:
        return None
    return max(measured, key=lambda pair: math.inf if math.isnan(pair[1]) else pair[1])


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def written_by(origin: BatchOrigin | None) -> str:
    """"; written by req R at step N, the second request of a 3-request extend batch (extend
    lengths [...])": where the state came from, for a #37836-class report."""
    if origin is None:
        return ""
    text = f"; written by request {origin.rid} before step {origin.step}"
    if origin.forward == "finish":
        return text + " (its working state when it finished)"
    if origin.batch_size > 0 and origin.position >= 0:
        nth = _ORDINALS[origin.position] if origin.position < len(_ORDINALS) else f"#{origin.position + 1}"
        text += f", the {nth} request of a {origin.batch_size}-request {origin.forward} batch"
    if origin.extend_lens:
        text += f" (extend lengths {list(origin.extend_lens)})"
    if origin.seqlen >= 0:
        text += f", tracked at position {origin.seqlen}"
    return text
