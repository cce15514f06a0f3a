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

COMPONENTS = ("conv", "temporal")
TOLERANCE_REL_L2: dict[str, dict[str, float]] = {
    "engine": {"conv": 0.03, "temporal": 0.03},
    "engine-decoded": {"conv": 0.05, "temporal": 0.05},
    "transformers": {"conv": 0.1, "temporal": 0.035},
}
"""Largest relative L2 distance of each component still read as the same state, by oracle and,
for the engine oracle, by the forward that wrote the state. Calibrated with
tests/bench/calibrate_t2.py (160 requests a run; README, "T2 verification"):
- engine, a state a prefill wrote (tracked or final): the same kernels on both sides. NemotronH's
  clean states are bit-exact (0); the gated delta net's reach 0.009 (a tracked checkpoint comes
  from FLA's chunk states `h`, rounded to bf16, the reference's from its fp32 final state);
  faulty states start at 0.25 (temporal) / 0.062 (conv).
- engine-decoded, a state decode steps wrote (no_buffer's finished working slot, a decode-tracked
  checkpoint, a working state after decoding): the token-by-token recurrence against the
  reference's chunked prefill; clean 0.008, faulty from 0.31 (temporal) / 0.074 (conv).
- transformers: two implementations of a bf16 model; a conv window holds the last kernel - 1
  inputs rounded to bf16, where one flipped expert of Qwen3-Next's MoE changes a whole input,
  so it is allowed more (a fault shows in the temporal state, which holds the whole prefix)."""


def tolerances(oracle: str, forward: str = "") -> dict[str, float]:
    """The tolerance per component of `oracle` for a state written by `forward` ("extend",
    "decode", "finish", or "" when not known: the looser engine bound). Oracle "" is a recording
    from before oracles were named: transformers."""
    if oracle == "engine":
        return TOLERANCE_REL_L2["engine" if forward == "extend" else "engine-decoded"]
    return TOLERANCE_REL_L2["transformers"]


def beyond(oracle: str, forward: str, conv: float, temporal: float) -> tuple[str, float, float] | None:
    """The component farthest beyond its tolerance (NaN first; -1 is not measured) with its
    distance and tolerance; None when every measured component is within."""
    limits = tolerances(oracle, forward)
    pairs = [(name, value, limits[name]) for name, value in zip(COMPONENTS, (conv, temporal)) if value != -1.0]
    over = [pair for pair in pairs if math.isnan(pair[1]) or pair[1] > pair[2]]
    if not over:
        return None
    return max(over, key=lambda pair: math.inf if math.isnan(pair[1]) else pair[1] / pair[2])


def tolerance_text(oracle: str, forward: str = "") -> str:
    """ "conv 0.1, temporal 0.035": the tolerances, for a report."""
    return ", ".join(f"{name} {limit:g}" for name, limit in tolerances(oracle, forward).items())


def check_recompute(view: StepView) -> list[Violation]:
    """Each verified record new at this boundary (not in the previous state): a component
    farther than its oracle's tolerance from the recompute, or a NaN distance, is a violation."""
    owners = view.tree_owners
    out: list[Violation] = []
    for slot in view.changed_contents:
        now = view.state.contents[slot]
        if not is_verified(now):
            continue
        excess = beyond(now.recompute_oracle, forward_of(now), now.recompute_conv_rel_l2, now.recompute_temporal_rel_l2)
        if excess is None:
            continue
        component, distance, limit = excess
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
                f"oracle: {component} relative L2 {distance:.3g} > {limit:g}{written_by(now.origin)}",
            )
        )
    return out


def is_verified(content: SlotContent) -> bool:
    return content.recompute_conv_rel_l2 != -1.0 or content.recompute_temporal_rel_l2 != -1.0


def forward_of(content: SlotContent) -> str:
    """The forward that wrote the slot's state, "" when not known."""
    return content.origin.forward if content.origin is not None else ""


_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def written_by(origin: BatchOrigin | None) -> str:
    """ "; written by req R at step N, the second request of a 3-request extend batch (extend
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
