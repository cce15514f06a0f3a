"""StatsCollector on sglang's real mamba slot allocator: the slots in use are read when asked,
the peak is the most seen at a sample or now."""

from __future__ import annotations

from sglang.srt.mem_cache.allocator.mamba import MambaSlotAllocator

from mcinspect_engine_hooks.event_sink import EventSink
from mcinspect_engine_hooks.stats import StatsCollector


def test_in_use_is_read_when_asked_and_the_peak_is_kept() -> None:
    allocator = MambaSlotAllocator(8, "cpu")
    stats = StatsCollector(allocator, EventSink())
    held = allocator.alloc(3)
    stats.sample([])
    allocator.free(held[:2])
    now = stats.snapshot(step=5, hook_errors=0)
    assert (now.step, now.mamba_pool_size, now.mamba_slots_in_use, now.mamba_slots_peak) == (5, 8, 1, 3)
    allocator.alloc(6)  # more than ever sampled: the peak counts the slots in use now
    later = stats.snapshot(step=6, hook_errors=0)
    assert (later.mamba_slots_in_use, later.mamba_slots_peak) == (7, 7)
