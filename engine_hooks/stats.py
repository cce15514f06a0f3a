"""Running counters of one scheduler process for the demo summary and `mcinspect info`.

Nothing here runs at every step: the inspector samples the pool's occupancy on captured steps
whose mamba free list moved (the only steps it can peak in) and every SAMPLE_EVERY-th step
(O(1)), the running requests' slots every SAMPLE_EVERY-th step
(O(running requests)); evictions are counted by the EventSink as they happen; the slots in use
are read when asked."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from mcinspect.schema import SCHEMA_VERSION, SlotLayout, Stats

from .event_sink import EventSink
from .req_kv import kv_of
from .tensor_runs import ints_of_many

SAMPLE_EVERY = 16
"""The running requests' slots are sampled this often, observed or not (the layouts and the
distribution of slots per request do not need every step; the hooks' cost does), the pool's
occupancy on every captured step whose free list moved too."""


class StatsCollector:
    """Sampled on the scheduler thread; `snapshot()` may be called from another thread.

    `allocator` is sglang's MambaSlotAllocator, `sink` the hooks' EventSink."""

    def __init__(self, allocator: Any, sink: EventSink) -> None:
        self._lock = threading.Lock()
        self._allocator = allocator
        self._sink = sink
        self.mamba_pool_size = int(allocator.size)
        self.slots_peak = 0
        self.slots_per_request: Counter[int] = Counter()
        self.example_layouts: dict[int, SlotLayout] = {}

    def slots_in_use(self) -> int:
        """Slots out of the allocator's free list now (its `free_slots` is replaced whole at
        each alloc and free, so another thread reads one list or the next, never a torn one)."""
        return self.mamba_pool_size - self._allocator.free_slots.shape[0]  # not len(): Python in torch

    def sample(self, running: list[Any] | None) -> None:
        """The pool's occupancy (for the peak) and, unless `running` is None, each running
        request's slots. Slot counts come from the requests' Python fields; slot ids are read
        (a device copy) only for the first request seen with a new count."""
        in_use = self.slots_in_use()
        if in_use > self.slots_peak:
            self.slots_peak = in_use  # a plain int: snapshot() reads it unlocked
        if running is not None:
            self._sample_requests(running)

    def _sample_requests(self, running: list[Any]) -> None:
        reqs = [req for req in running if kv_of(req).mamba_pool_idx is not None]
        counts = [_slots_held(kv_of(req)) for req in reqs]
        layouts = []
        if not self.example_layouts.keys() >= set(counts):
            layouts = _layouts([req for req, count in zip(reqs, counts) if count not in self.example_layouts])
        with self._lock:
            self.slots_per_request.update(counts)
            for layout in layouts:
                self.example_layouts.setdefault(1 + len(layout.ping_pong), layout)

    def snapshot(self, step: int, hook_errors: int) -> Stats:
        """The counters after step `step`; the peak counts the slots in use now too."""
        in_use = self.slots_in_use()
        with self._lock:
            return Stats(
                schema_version=SCHEMA_VERSION,
                step=step,
                mamba_pool_size=self.mamba_pool_size,
                mamba_slots_in_use=in_use,
                mamba_slots_peak=max(self.slots_peak, in_use),
                evicted_mamba_slots=self._sink.evicted_slots,
                evicted_tokens=self._sink.evicted_tokens,
                hook_errors=hook_errors,
                slots_per_request=dict(self.slots_per_request),
                example_layouts=[self.example_layouts[k] for k in sorted(self.example_layouts)],
            )


def _slots_held(kv: Any) -> int:
    """Working slot + the ping-pong entries in use (sglang 0.5.23 keeps `mamba_ping_pong_empty`
    in step with the -1 entries of the buffer; 0.5.22 has the buffer only)."""
    if hasattr(kv, "mamba_ping_pong_empty"):
        empty = kv.mamba_ping_pong_empty
        return 1 + (len(empty) - sum(empty) if empty else 0)
    buffer = kv.mamba_ping_pong_track_buffer
    return 1 + (int((buffer >= 0).sum()) if buffer is not None else 0)


def _layouts(reqs: list[Any]) -> list[SlotLayout]:
    """Each request's working and ping-pong slots (requests holding a working slot), read in
    one device copy."""
    values = ints_of_many([t for req in reqs for t in (kv_of(req).mamba_pool_idx, kv_of(req).mamba_ping_pong_track_buffer)])
    return [
        SlotLayout(rid=req.rid, working=working[0], ping_pong=[slot for slot in ping_pong if slot >= 0])
        for req, working, ping_pong in zip(reqs, values[0::2], values[1::2])
    ]
