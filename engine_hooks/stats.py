"""Running counters of one scheduler process for the demo summary and `mcinspect info`
(cheap: O(1) a step, O(running requests) on the steps that sample the requests' slots)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from mcinspect.schema import SCHEMA_VERSION, EvictEvent, Event, SlotLayout, Stats

from .tensor_runs import ints_of_many

SAMPLE_EVERY = 8
"""Steps nobody observes look at the running requests' slots only this often (the layouts and
the distribution of slots per request do not need every step; the hooks' cost does)."""


class StatsCollector:
    """Updated on the scheduler thread; `snapshot()` may be called from another thread."""

    def __init__(self, mamba_pool_size: int) -> None:
        self._lock = threading.Lock()
        self.mamba_pool_size = mamba_pool_size
        self.step = 0
        self.slots_in_use = 0
        self.slots_peak = 0
        self.evicted_mamba_slots = 0
        self.evicted_tokens = 0
        self.slots_per_request: Counter[int] = Counter()
        self.example_layouts: dict[int, SlotLayout] = {}

    def on_step(self, scheduler: Any, events: list[Event], *, observed: bool) -> None:
        """After `process_batch_result`: pool occupancy, evictions, and on observed steps (and
        every SAMPLE_EVERY-th) each running request's slots. Slot counts come from the requests'
        Python fields; slot ids are read (a device copy) only for the first request seen with a
        new count. The usual step touches a few ints only: this runs at every step, right
        after the forward, when little of it is in the CPU's caches."""
        in_use = self.mamba_pool_size - len(scheduler.req_to_token_pool.mamba_allocator.free_slots)
        self.step += 1  # plain ints: snapshot() may read them a step apart, never torn
        self.slots_in_use = in_use
        if in_use > self.slots_peak:
            self.slots_peak = in_use
        if events:
            self._count_evictions(events)
        if observed or self.step % SAMPLE_EVERY == 0:
            self._sample_requests(scheduler.running_batch.reqs)

    def _count_evictions(self, events: list[Event]) -> None:
        evictions = [event for event in events if isinstance(event, EvictEvent)]
        with self._lock:
            for event in evictions:
                self.evicted_mamba_slots += len(event.slots)
                self.evicted_tokens += event.tokens

    def _sample_requests(self, running: list[Any]) -> None:
        reqs = [req for req in running if req.kv.mamba_pool_idx is not None]
        counts = [_slots_held(req.kv) for req in reqs]
        layouts = []
        if not self.example_layouts.keys() >= set(counts):
            layouts = _layouts([req for req, count in zip(reqs, counts) if count not in self.example_layouts])
        with self._lock:
            self.slots_per_request.update(counts)
            for layout in layouts:
                self.example_layouts.setdefault(1 + len(layout.ping_pong), layout)

    def snapshot(self, hook_errors: int) -> Stats:
        with self._lock:
            return Stats(
                schema_version=SCHEMA_VERSION,
                step=self.step,
                mamba_pool_size=self.mamba_pool_size,
                mamba_slots_in_use=self.slots_in_use,
                mamba_slots_peak=self.slots_peak,
                evicted_mamba_slots=self.evicted_mamba_slots,
                evicted_tokens=self.evicted_tokens,
                hook_errors=hook_errors,
                slots_per_request=dict(self.slots_per_request),
                example_layouts=[self.example_layouts[k] for k in sorted(self.example_layouts)],
            )


def _slots_held(kv: Any) -> int:
    """Working slot + the ping-pong entries in use (sglang keeps `mamba_ping_pong_empty` in
    step with the -1 entries of the buffer)."""
    empty = kv.mamba_ping_pong_empty
    return 1 + (len(empty) - sum(empty) if empty else 0)


def _layouts(reqs: list[Any]) -> list[SlotLayout]:
    """Each request's working and ping-pong slots (requests holding a working slot), read in
    one device copy."""
    values = ints_of_many([t for req in reqs for t in (req.kv.mamba_pool_idx, req.kv.mamba_ping_pong_track_buffer)])
    return [
        SlotLayout(rid=req.rid, working=working[0], ping_pong=[slot for slot in ping_pong if slot >= 0])
        for req, working, ping_pong in zip(reqs, values[0::2], values[1::2])
    ]
