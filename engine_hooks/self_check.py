"""Engine-side self-check (MCINSPECT_SELF_CHECK=1): after each step, the incremental state must
equal a full re-read, and agree with sglang's own counters. For tests and for debugging
mcinspect itself; it costs a full capture per step, so it is off by default.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from mcinspect.schema import CacheState, Step

from .capture import Capture
from .pools_0523 import KvReader, mamba_allocator
from .tree_walk import walked_arena

SELF_CHECK_ENV = "MCINSPECT_SELF_CHECK"
logger = logging.getLogger("mcinspect.engine_hooks")


class SelfCheck:
    """Counts verified steps and failures; remembers the first failure's reason."""

    def __init__(self) -> None:
        self.steps = 0
        self.failures = 0
        self.first_failure = ""

    @classmethod
    def from_env(cls) -> SelfCheck | None:
        return cls() if os.environ.get(SELF_CHECK_ENV) == "1" else None

    def after_step(self, capture: Capture, scheduler: Any, step: Step, batch: Any = None) -> None:
        """`batch`: the step's batch, as the capture read it (its requests may not be in the
        running batch yet: a full read without it misses them)."""
        incremental = capture.state
        fresh = capture.full_state(step, batch)  # same content if the deltas were right; rebaselines if not
        reasons = differences(incremental, fresh) + disagreements_with_sglang(fresh, scheduler, capture.full_detail)
        if KvReader(scheduler.token_to_kv_pool_allocator).read() != fresh.kv:  # a new reader reads the list whole
            reasons.append("KV free runs (edited from step to step) differ from the free list read whole")
        self.steps += 1
        if reasons:
            self.failures += 1
            if not self.first_failure:
                self.first_failure = f"step {step}: {reasons[0]}"
                logger.error("mcinspect self-check failed at %s", self.first_failure)


def differences(incremental: CacheState, fresh: CacheState) -> list[str]:
    """Where replaying deltas diverged from a full read (first few only)."""
    reasons = []
    for name in ("nodes", "slots", "requests"):
        a, b = getattr(incremental, name), getattr(fresh, name)
        if a != b:
            keys = sorted({k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}, key=str)[:3]
            reasons.append(f"{name} differ from a full read at {keys}")
    if incremental.kv != fresh.kv:
        reasons.append("KV free list differs from a full read")
    return reasons


def disagreements_with_sglang(state: CacheState, scheduler: Any, full_detail: bool) -> list[str]:
    """The state against sglang's own counters of the same moment."""
    reasons = []
    allocator = mamba_allocator(scheduler.req_to_token_pool)
    free = sum(1 for claims in state.slots.values() for claim in claims if claim.kind == "free")
    if free != allocator.available_size():
        reasons.append(f"{free} free slot claims, mamba allocator says {allocator.available_size()}")
    kv_free = sum(length for _, length in state.kv.free_runs)
    sglang_free = scheduler.token_to_kv_pool_allocator.available_size()
    if kv_free != sglang_free:
        reasons.append(f"{kv_free} free KV tokens, allocator says {sglang_free}")
    if full_detail:
        cache = scheduler.tree_cache
        # The Python tree core's arena; a cache keeping its nodes itself (0.5.16, MambaRadixCache) walked from its root.
        arena = cache.tree_core._node_arena if hasattr(cache, "tree_core") else walked_arena(cache.root_node)
        if len(state.nodes) != len(arena):
            reasons.append(f"{len(state.nodes)} nodes, sglang's tree has {len(arena)}")
        else:
            for node_id, node in arena.items():
                record = state.nodes.get(node_id)
                if record is None or record.key_len != len(node.key):
                    reasons.append(f"node {node_id}: key length {None if record is None else record.key_len}, sglang {len(node.key)}")
                    break
    return reasons
