"""Fingerprints of tree-owned mamba slots, read only once their producing forward has finished.

Timing rule: capture runs after `process_batch_result` of batch k-1; under overlap scheduling
batch k's forward may already be running and may still write a slot that was donated to the
tree while batch k was scheduled. So a slot is fingerprinted only when the same node owned it
at the previous capture too: by then every forward that could legitimately write it (batch
k) has finished. A slot's first fingerprint therefore lands one step after its donation; a
later change while the same node owns it is what check T1 reports.

A slot is fingerprinted the first step it is stable, and again every RECHECK_EVERY steps while
its node keeps it (T1 sees an in-place change of a cached state within that many steps): on the
CPU engine a call costs about the same for 1 slot as for 30 (a few KB each; the fixed cost of
the torch ops dominates), so steps without a new stable slot mostly skip the call. On a GPU a
slot is tens of MB, so MCINSPECT_FINGERPRINT_BUDGET caps the slots per call; the rest are
visited round-robin over the following calls.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any

import torch

from mcinspect.schema import SlotContent, SlotId, Step
from mcinspect_kernels.fingerprint import fingerprint_slots

BUDGET_ENV = "MCINSPECT_FINGERPRINT_BUDGET"
RECHECK_EVERY = 4


class ContentCapture:
    """Keeps the last fingerprint of each tree-owned slot; `capture` returns what is new."""

    def __init__(self, scheduler: Any) -> None:
        cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
        self._conv: list[torch.Tensor] = list(cache.conv)
        self._temporal: torch.Tensor = cache.temporal
        budget = os.environ.get(BUDGET_ENV)
        self._budget = int(budget) if budget else None
        self._previous_owners: dict[int, int] = {}
        self._contents: dict[SlotId, SlotContent] = {}
        self._queue: deque[int] = deque()

    def capture(self, step: Step, owners: dict[int, int]) -> tuple[dict[SlotId, SlotContent], list[SlotId]]:
        """Fingerprint the slots `owners` (slot -> node) that the same node owned last step.

        Returns the new or changed fingerprints, and the slots whose fingerprint was dropped
        because they left the tree or changed owner (their old content describes nothing now)."""
        stable = [slot for slot, node in owners.items() if self._previous_owners.get(slot) == node]
        dropped = [slot for slot in self._contents if owners.get(slot) != self._previous_owners.get(slot)]
        self._previous_owners = dict(owners)
        for slot in dropped:
            del self._contents[slot]
        if step % RECHECK_EVERY and all(slot in self._contents for slot in stable):
            return {}, dropped
        slots = self._within_budget(stable)
        if not slots:
            return {}, dropped
        ids = torch.tensor(slots, dtype=torch.int64, device=self._temporal.device)
        result = fingerprint_slots(self._conv, self._temporal, ids)
        fresh: dict[SlotId, SlotContent] = {}
        for slot, fingerprint, nonfinite, zero in zip(
            slots, result.fingerprint.tolist(), result.nonfinite.tolist(), result.all_zero.tolist()
        ):
            content = SlotContent(slot=SlotId(slot), fingerprint=fingerprint, nonfinite=nonfinite, zero=zero, step=step)
            known = self._contents.get(SlotId(slot))
            if known is None or (known.fingerprint, known.nonfinite, known.zero) != (fingerprint, nonfinite, zero):
                fresh[SlotId(slot)] = content
        self._contents.update(fresh)
        return fresh, dropped

    def current(self) -> dict[SlotId, SlotContent]:
        return dict(self._contents)

    def _within_budget(self, stable: list[int]) -> list[int]:
        if self._budget is None or len(stable) <= self._budget:
            return stable
        # Never-fingerprinted slots first, then round-robin over the rest.
        new = [slot for slot in stable if slot not in self._contents]
        if len(new) >= self._budget:
            return new[: self._budget]
        stable_set = set(stable)
        self._queue = deque(slot for slot in self._queue if slot in stable_set)
        queued = set(self._queue)
        self._queue.extend(slot for slot in stable if slot not in queued and slot not in new)
        picked = list(new)
        while len(picked) < self._budget and self._queue:
            slot = self._queue.popleft()
            picked.append(slot)
            self._queue.append(slot)
        return picked
