"""T3 capture: the deferred copy-on-write and clears of an extend forward, fingerprinted right
after they ran and before the forward's layers extend the working slots (the only moment at
which "the working slot equals its source" / "a cleared slot is zero" can be seen).

Target: the `cow.copy` row of `hooks_0523.HOOKS` (around: copy_begin keeps the batch's COW / clear slot ids, which the method sets to None; copy_end queues a CowEvent for every extend forward, empty or not: check cow-ran, with the sources, destinations and cleared slots fingerprinted: T3).

The fingerprints run on the forward's stream in the forward's thread: on the CPU engine they
are part of the forward; skipped for steps no client observes (`EventSink.observed`, checked
by the AROUND wrapper of `ErrorCounter.around_observed`). On a GPU they are queued behind the
copies with no sync (the slot ids stay on the device and are range-checked there; only the
first call copies the pool's chunk table to the device, which waits) and read at the step
boundary with the step's other device values: a sync here would wait for the forward and could
hide the very races T3 looks for (copies racing the forward: sglang #24954). Not captured: int8
checkpoint pools (the destination is a dequantised copy, not bit-equal to its source).
"""

from __future__ import annotations

from typing import Any

import torch

from mcinspect.schema import CowEvent
from mcinspect_kernels.fingerprint import HostFold, HostPrints, SlotFingerprints, fingerprint_slots

from .event_sink import DeferredSlots, DeferredValues, EventSink


class CowHooks:
    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self._pending: tuple[Any, Any, Any] | None = None
        self._fold: tuple[list[torch.Tensor], HostFold | None] = ([], None)
        """(pool tensors, their prepared host fold): the engine keeps its pool, prepared once."""

    def copy_begin(self, runner: Any, forward_batch: Any, /, *args: Any, **kwargs: Any) -> None:
        mode = getattr(forward_batch, "forward_mode", None)
        if mode is None or not mode.is_extend():  # a decode step's: copy_end keeps nothing of it
            self._pending = None
            return
        self._pending = (
            getattr(forward_batch, "mamba_cow_src_indices", None),
            getattr(forward_batch, "mamba_cow_dst_indices", None),
            getattr(forward_batch, "mamba_clear_indices", None),
        )

    def copy_end(self, ret: Any, runner: Any, forward_batch: Any, /, *args: Any, **kwargs: Any) -> None:
        pending, self._pending = self._pending, None
        if pending is None:  # not an extend forward, or copy_begin() failed
            return
        ran = getattr(forward_batch, "mamba_cow_src_indices", None) is None and getattr(forward_batch, "mamba_clear_indices", None) is None
        if not ran:  # sglang left the ids for later
            return
        sources, destinations, cleared = (t if t is not None and t.numel() else None for t in pending)
        copies = 0 if sources is None else sources.numel()
        # Every extend forward leaves an event, empty or not: check cow-ran reads it as "the
        # forward after the admission ran its deferred copies, these ones".
        fields = dict(
            sources=DeferredSlots([sources]),
            destinations=DeferredSlots([destinations if copies else None]),
            cleared=DeferredSlots([cleared]),
            source_fingerprints=[],
            destination_fingerprints=[],
            cleared_zero=[],
        )
        result = self._fingerprints(runner.req_to_token_pool, sources, destinations, cleared)
        if result is not None:
            fields.update(
                source_fingerprints=DeferredValues([result.fingerprint[:copies]]),
                destination_fingerprints=DeferredValues([result.fingerprint[copies : 2 * copies]]),
                cleared_zero=DeferredValues([result.all_zero[2 * copies :]], cast=bool),
            )
        self.sink.emit(CowEvent, **fields)

    def _fingerprints(self, pool: Any, sources: Any, destinations: Any, cleared: Any) -> SlotFingerprints | HostPrints | None:
        """Fingerprints of the copies' sources, destinations and the cleared slots, or None where
        they cannot be taken (int8 checkpoints: a dequantised copy is not bit-equal). Without
        copies, on the host: only the cleared slots' zero flags (the fingerprints are empty lists)."""
        parts = [t for t in (sources, destinations, cleared) if t is not None]
        if not parts or getattr(pool, "mamba_ckpt_pool", None) is not None:
            return None
        cache = pool.mamba_pool.mamba_cache
        slots = torch.cat([t.reshape(-1) for t in parts]) if len(parts) > 1 else parts[0].reshape(-1)
        translate = getattr(pool, "translate_mamba_indices", None)  # 0.5.15 on; before, slot ids index the cache as they are
        slots = slots if translate is None else translate(slots)
        fold = self._host_fold(cache)
        if fold is None:
            return fingerprint_slots(list(cache.conv), cache.temporal, slots)
        ids = slots.tolist()
        if sources is None:  # clears alone: the zero flags are all the event carries
            return HostPrints([], [], fold.zero(ids))
        return fold(ids)

    def _host_fold(self, cache: Any) -> HostFold | None:
        tensors = [*cache.conv, cache.temporal]
        kept, fold = self._fold
        if len(kept) != len(tensors) or any(a is not b for a, b in zip(kept, tensors)):
            fold = HostFold.of_pool(tensors[:-1], tensors[-1])
            self._fold = tensors, fold
        return fold
