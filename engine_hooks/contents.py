"""Fingerprints of tree-owned mamba slots, read only once their producing forward has finished.

Timing rule: capture runs after `process_batch_result` of batch k-1; under overlap scheduling
batch k's forward may already be running and may still write a slot that was donated to the
tree while batch k was scheduled. So a slot is fingerprinted only when the same node owned it
at the previous capture too: by then every forward that could legitimately write it (batch
k) has finished. A slot's first fingerprint therefore lands one step after its donation; a
later change while the same node owns it is what check T1 reports.

A slot is fingerprinted the first step it is stable (only those slots, that step), and again
every RECHECK_EVERY steps while its node keeps it (T1 sees an in-place change of a cached state
within that many steps): on the CPU engine a call costs about the same for 1 slot as for 30 (a
few KB each; the fixed cost of the torch ops dominates), so steps without a new stable slot
mostly skip the call. A call reads at most `budget` slots (MCINSPECT_FINGERPRINT_BUDGET; by default
DEFAULT_BUDGET on the host, and off it as many as DEVICE_BUDGET_BYTES holds: on a GPU a slot is
tens of MB, and a call's cost the bytes it reads): past it, never-read slots first, then the others
round-robin over the following calls, so on a large tree a recheck comes round every
RECHECK_EVERY * slots / budget steps.
Per capture the work is O(slots whose owner changed + budget), not O(tree): the capture says
which slots changed owner. On host pools a recheck hashes only the slots whose bits moved since
their last fingerprint (content_mirror.py); the others keep it, as hashing them would.
"""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Mapping
from typing import Any

import torch

from mcinspect.schema import SlotContent, SlotId, Step
from mcinspect_kernels.fingerprint import HostFold, HostPrints, fingerprint_slots, slot_bytes

from .content_mirror import ContentMirror
from .cow_map import CowMap, Frozen

BUDGET_ENV = "MCINSPECT_FINGERPRINT_BUDGET"
RECHECK_EVERY = 4
DEFAULT_BUDGET = 256
"""Slots per fingerprint call on host pools: about 1.3 ms of the scheduler thread on this CPU,
where 1024 slots took 21 ms (the demo's pools are smaller, so there every stable slot is read at
every call)."""
DEVICE_BUDGET_BYTES = 512 << 20
"""Bytes of state per fingerprint call on other devices, where the cost is the bytes read: on an
H200 a call of 512 MiB (10 slots of Qwen3-Next-80B at TP 2) took 0.43-0.47 ms, results back on
the host, where one of DEFAULT_BUDGET such slots took 6.5 ms (tests/gpu/check_slot_kernels.py)."""


def default_budget(tensors: list[torch.Tensor]) -> int:
    """Slots per fingerprint call: DEFAULT_BUDGET on the host; elsewhere as many as fit in
    DEVICE_BUDGET_BYTES, at least one."""
    if tensors[0].device.type == "cpu":
        return DEFAULT_BUDGET
    return max(1, DEVICE_BUDGET_BYTES // max(slot_bytes(tensors), 1))


def slot_prints(conv: list[torch.Tensor], temporal: torch.Tensor, slots: list[int]) -> HostPrints:
    """`fingerprint_slots` as lists, for a pool on any device: the slot ids go from the host
    (their bounds checked there, where a device tensor's check is a sync) and the results come
    back in one copy."""
    result = fingerprint_slots(conv, temporal, torch.tensor(slots, dtype=torch.int64))
    fingerprint, nonfinite, zero = torch.stack([result.fingerprint, result.nonfinite, result.all_zero.long()]).tolist()
    return HostPrints(fingerprint, nonfinite, [bool(flag) for flag in zero])


SETTLE_CHUNK = 2048
"""Stable slots moved into the round-robin per call (well under a millisecond)."""


def _minus(a: set[int], b: set[int]) -> set[int]:
    """`a - b` (a new set or `a` itself), iterating the smaller of the two, in C."""
    if len(a) <= len(b):
        return a - b
    a -= b
    return a


class ContentCapture:
    """Keeps the last fingerprint of each tree-owned slot; `capture` returns what is new."""

    def __init__(self, scheduler: Any) -> None:
        cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
        self._conv: list[torch.Tensor] = list(cache.conv)
        self._temporal: torch.Tensor = cache.temporal
        self._mirror = ContentMirror.of_pool([*self._conv, self._temporal])
        """Host pools: the bits of each slot's last fingerprint (a recheck of unmoved bits is a compare)."""
        self._fold = HostFold.of_pool(self._conv, self._temporal)
        """Host pools: the fold prepared once (half a call's cost on the CPU engine's pools)."""
        budget = os.environ.get(BUDGET_ENV)
        self._budget = int(budget) if budget else default_budget([*self._conv, self._temporal])
        self._previous_owners: dict[int, int] = {}
        """Only for callers that do not say which owners changed."""
        self._contents: CowMap[SlotId, SlotContent] = CowMap()
        """Snapshots take it frozen (cow_map.py): no 100k-slot copy under the inspector's lock."""
        self._unsettled: set[int] = set()
        """Slots whose owner changed at the last capture: the owned ones are stable from the next one on."""
        self._missing: set[int] = set()
        """Stable slots never fingerprinted under their owner (past the last call's budget)."""
        self._queue: deque[int] = deque()
        """Round-robin of the slots to recheck; entries of slots that left the tree are skipped."""
        self._queued: set[int] = set()
        self._settling: set[int] = set()
        """Stable slots not yet moved into `_missing` and the round-robin (SETTLE_CHUNK a call)."""

    def capture(
        self, step: Step, owners: Mapping[int, int], changes: set[int] | None = None
    ) -> tuple[dict[SlotId, SlotContent], list[SlotId]]:
        """Fingerprint the slots `owners` (slot -> node) that the same node owned last step.

        `changes`: the slots whose owner changed since the last call (None: found by comparing
        with the owners of the last call, O(tree)); kept, and changed later. Returns the new or
        changed fingerprints, and the slots whose fingerprint was dropped because they left the
        tree or changed owner (their old content describes nothing now)."""
        if changes is None:
            changes = {s for s in owners.keys() | self._previous_owners.keys() if owners.get(s) != self._previous_owners.get(s)}
            self._previous_owners = dict(owners)
        recheck = step % RECHECK_EVERY == 0
        if not (changes or self._unsettled or self._settling or self._missing or recheck):
            return {}, []  # most decode steps: no slot changed owner, none settles, none is due
        dropped = self._contents.pop_keys_in(changes)
        if self._mirror is not None and dropped:
            self._mirror.forget(dropped)
        # Every set operation here iterates the smaller side: after a catch-up `changes` may hold
        # every slot of a 100k-node tree, and the step after it every slot is stable. Slots that
        # left the tree stay in `_unsettled` (only owned ones are settled or picked): 100k of
        # `changes & owners.keys()` was 6 ms.
        stable, self._unsettled = _minus(self._unsettled, changes), changes
        self._settling = _minus(self._settling, changes)
        if len(stable) > len(self._settling):
            stable, self._settling = self._settling, stable
        self._settling |= stable
        self._missing = _minus(self._missing, changes)
        self._settle(owners)
        if not recheck and not self._missing:
            return {}, dropped
        if recheck:
            picked = self._pick(owners)
            slots = self._changed(picked)
        else:
            # Only the never-read slots, with no compare (none has bits kept): a step that caches
            # a state (half the demo's) compared every cached slot's bits again, the bulk of the
            # content cost.
            picked = slots = list(itertools.islice(self._missing, self._budget))
        self._missing.difference_update(picked)
        if not slots:
            return {}, dropped
        if self._fold is not None:
            prints = self._fold(slots)
        else:
            prints = slot_prints(self._conv, self._temporal, slots)
        fresh: dict[SlotId, SlotContent] = {}
        for slot, fingerprint, nonfinite, zero in zip(slots, *prints):
            content = SlotContent(slot=SlotId(slot), fingerprint=fingerprint, nonfinite=nonfinite, zero=zero, step=step)
            known = self._contents.get(SlotId(slot))
            if known is None or (known.fingerprint, known.nonfinite, known.zero) != (fingerprint, nonfinite, zero):
                fresh[SlotId(slot)] = content
        self._contents.update(fresh)
        if self._mirror is not None:
            self._mirror.store(slots)
        return fresh, dropped

    def _changed(self, slots: list[int]) -> list[int]:
        """`slots` but those whose bits are those of their recorded fingerprint (host pools)."""
        if self._mirror is None or not slots:
            return slots
        # A mirrored slot is in `_contents`: both are set together and dropped together.
        return [slot for slot, same in zip(slots, self._mirror.unchanged(slots)) if not same]

    def current(self) -> dict[SlotId, SlotContent]:
        return self._contents.to_dict()

    def frozen(self) -> Frozen[SlotId, SlotContent]:
        """The fingerprints now, in O(shards), for another thread to read (cow_map.py)."""
        return self._contents.freeze()

    def _settle(self, owners: Mapping[int, int]) -> None:
        """Move up to SETTLE_CHUNK stable slots into the never-read set and the round-robin (a
        catch-up's 100k at once would cost the scheduler thread tens of ms in one step)."""
        missing, queue, queued, settling = self._missing, self._queue, self._queued, self._settling
        for _ in range(min(SETTLE_CHUNK, len(settling))):
            slot = settling.pop()
            if slot in owners:
                missing.add(slot)
                if slot not in queued:
                    queue.append(slot)
                    queued.add(slot)

    def _pick(self, owners: Mapping[int, int]) -> list[int]:
        """The stable slots to read now: all when they fit the budget, else never-read ones
        first, then the round-robin."""
        if len(owners) <= self._budget:
            return sorted(slot for slot in owners if slot not in self._unsettled)
        picked = list(itertools.islice(self._missing, self._budget))
        chosen = set(picked)
        for _ in range(len(self._queue)):
            if len(picked) >= self._budget:
                break
            slot = self._queue.popleft()
            if slot not in owners:
                self._queued.discard(slot)  # left the tree; queued again once stable under a new owner
                continue
            self._queue.append(slot)
            if slot not in self._unsettled and slot not in chosen:
                picked.append(slot)
                chosen.add(slot)
        return picked
