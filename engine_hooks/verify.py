"""Engine-side T2 (MCINSPECT_VERIFY_RECOMPUTE=1, embedded CPU engine): a cached state must equal
the state of its node's prefix run alone.

Only a recompute catches #37836 (slot ids, seqlens and depths right; the state of another
token position cached). After ContentCapture fingerprints a tree slot for the first time under
its node (so its producing forward has finished, see contents.py), the slot is queued here;
each step verifies up to MCINSPECT_VERIFY_BUDGET queued slots (oldest first) against
`RecomputeOracle` (transformers' implementation of the same tiny model) and re-publishes their
`SlotContent` with `recompute_conv_rel_l2` / `recompute_temporal_rel_l2` set. The record keeps its
fingerprint and fingerprint step, so content checks see no new fingerprint.

Prefix tokens are read from sglang's Python tree core (the node's path from the root); on the
Rust core nodes are hidden and nothing is verified. A queued slot whose node no longer owns it
is dropped unverified. Cost: one transformers forward over the prefix per distinct prefix
(cached), about 0.1-0.3 s on a loaded 2-core machine.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
import torch

from mcinspect.schema import NodeId, SlotContent, SlotId
from mcinspect_kernels.state_distance import state_distance_to

from .cpu_engine.patches import ENV_FLAG

ENV_VAR = "MCINSPECT_VERIFY_RECOMPUTE"
BUDGET_ENV = "MCINSPECT_VERIFY_BUDGET"
DEFAULT_BUDGET = 4
"""Slots verified per step: a step with many donations spreads its slots over later steps."""


class RecomputeVerifier:
    """Queues newly fingerprinted tree slots and verifies them against the oracle."""

    def __init__(self, scheduler: Any, *, budget: int = DEFAULT_BUDGET, oracle: Any = None) -> None:
        cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
        (conv,) = cache.conv  # Qwen3-Next: one conv tensor (q | k | v channels)
        self._conv: torch.Tensor = conv
        self._temporal: torch.Tensor = cache.temporal
        self._core = scheduler.tree_cache.tree_core
        self._model_path = str(scheduler.server_args.model_path)
        self._oracle = oracle
        self.budget = budget
        self._pending: dict[SlotId, SlotContent] = {}
        """Fingerprinted, not yet verified (insertion order = age)."""
        self._verified: dict[SlotId, SlotContent] = {}

    @classmethod
    def from_env(cls, scheduler: Any) -> RecomputeVerifier | None:
        """A verifier when asked for, in the embedded CPU engine (the oracle loads the served
        model into transformers on the CPU: fine for the tiny model only), on the Python core."""
        if os.environ.get(ENV_VAR) != "1" or os.environ.get(ENV_FLAG) != "1":
            return None
        if not hasattr(scheduler.tree_cache.tree_core, "_node_arena"):
            return None
        budget = os.environ.get(BUDGET_ENV)
        return cls(scheduler, budget=int(budget) if budget else DEFAULT_BUDGET)

    @property
    def oracle(self) -> Any:
        """Loaded on first use: the engine starts without waiting for transformers."""
        if self._oracle is None:
            from .cpu_engine.oracle import RecomputeOracle

            self._oracle = RecomputeOracle(self._model_path)
        return self._oracle

    def after_capture(
        self, fresh: dict[SlotId, SlotContent], dropped: list[SlotId], owners: dict[SlotId, NodeId]
    ) -> dict[SlotId, SlotContent]:
        """`fresh` (ContentCapture's new fingerprints) plus the records verified now."""
        for slot in dropped:
            self._pending.pop(slot, None)
            self._verified.pop(slot, None)
        for slot, content in fresh.items():
            self._verified.pop(slot, None)
            self._pending.pop(slot, None)  # re-queued at the end with its new fingerprint
            self._pending[slot] = content
        done = self._verify_some(owners)
        return {**fresh, **done}

    def overlay(self, contents: dict[SlotId, SlotContent]) -> dict[SlotId, SlotContent]:
        """ContentCapture's current records, with distances where this fingerprint was verified."""
        out = dict(contents)
        for slot, verified in self._verified.items():
            current = out.get(slot)
            if current is not None and (current.fingerprint, current.step) == (verified.fingerprint, verified.step):
                out[slot] = verified
        return out

    def _verify_some(self, owners: dict[SlotId, NodeId]) -> dict[SlotId, SlotContent]:
        arena = self._core._node_arena
        picked: list[tuple[SlotId, SlotContent, list[int]]] = []
        for slot in list(self._pending):
            if len(picked) >= self.budget:
                break
            content = self._pending.pop(slot)
            node = arena.get(owners.get(slot, NodeId(-1)))
            if node is not None and node.parent is not None:
                picked.append((slot, content, prefix_tokens(node)))
        if not picked:
            return {}
        ref_conv, ref_temporal = self.oracle.references([tokens for _, _, tokens in picked])
        ids = torch.tensor([slot for slot, _, _ in picked], dtype=torch.int64, device=self._temporal.device)
        # One distance per component: state_distance_to takes any pool-shaped tensor as its
        # `temporal` argument, and a combined norm would be dominated by the conv window.
        conv = state_distance_to([], self._conv, ids, [], ref_conv[0]).rel_l2.tolist()
        temporal = state_distance_to([], self._temporal, ids, [], ref_temporal).rel_l2.tolist()
        out = {}
        for (slot, content, _), conv_rel, temporal_rel in zip(picked, conv, temporal):
            out[slot] = msgspec.structs.replace(
                content, recompute_conv_rel_l2=conv_rel, recompute_temporal_rel_l2=temporal_rel
            )
        self._verified.update(out)
        return out


def prefix_tokens(node: Any) -> list[int]:
    """The token ids from the root to the end of `node`'s key (sglang `UnifiedTreeNode`)."""
    keys = []
    while node.parent is not None:
        keys.append(list(node.key.raw_token_ids()))
        node = node.parent
    return [token for key in reversed(keys) for token in key]
