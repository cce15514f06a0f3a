"""Capture cost vs tree size: a full snapshot against a 10-change step (goal: ratio <= 1/100).

Trees of 1k / 10k / 100k nodes are built through sglang's real UnifiedRadixCache (Python tree
core, FULL + MAMBA, extra_buffer, CPU pools) with mcinspect's hooks installed, as in an
engine: groups of 99 cached requests sharing an 8-token prefix, each with a 4-token suffix and
its own mamba state (100 nodes a group). A step's 10 changes: 4 inserts of new requests,
3 matches of cached ones, 2 match + lock + unlock, 1 mamba eviction.

Run: `.venv/bin/python tests/bench/bench_capture.py [N_NODES ...]` (default 1000 10000 100000).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))  # cpu_cache

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import

import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from array import array  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from mcinspect.schema import Step  # noqa: E402
from mcinspect_engine_hooks.capture import Capture  # noqa: E402
from mcinspect_engine_hooks.events import EventSink, hook_points  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_0523 import HOOKS  # noqa: E402
from mcinspect_engine_hooks.state_log import StateLog  # noqa: E402

import cpu_cache  # noqa: E402  (tests/support: sglang's real cache classes on CPU tensors)

PREFIX, SUFFIX, PER_GROUP = 8, 4, 99


class Workload:
    """Cached requests: group g's prefix tokens, request i's suffix tokens."""

    def __init__(self, scheduler: SimpleNamespace) -> None:
        self.tree = scheduler.tree_cache
        self.allocator = scheduler.token_to_kv_pool_allocator
        self.slots = scheduler.req_to_token_pool.mamba_allocator
        self.prefix_kv: list[torch.Tensor] = []
        self.cached: list[list[int]] = []
        self.count = 0

    def prefix(self, group: int) -> list[int]:
        return [1_000_000 + group * PREFIX + i for i in range(PREFIX)]

    def insert(self, group: int) -> None:
        """Insert a new request of `group`, its prefix KV shared with the group's first."""
        self.count += 1
        key = self.prefix(group) + [self.count * SUFFIX + i for i in range(SUFFIX)]
        if group == len(self.prefix_kv):
            value = self.allocator.alloc(PREFIX + SUFFIX)
            self.prefix_kv.append(value[:PREFIX])
            shared = 0
        else:
            value = torch.cat((self.prefix_kv[group], self.allocator.alloc(SUFFIX)))
            shared = PREFIX  # already the tree's: the insert must not free it as a duplicate
        mamba = self.slots.alloc(1)
        self.tree.insert(InsertParams(key=RadixKey(array("q", key)), value=value, mamba_value=mamba, prev_prefix_len=shared))
        self.cached.append(key)

    def match(self, key: list[int]) -> int:
        return self.tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", key)))).last_device_node

    def ten_changes(self, rng: random.Random) -> None:
        groups = len(self.prefix_kv)
        for _ in range(4):
            self.insert(rng.randrange(groups))
        for _ in range(3):
            self.match(rng.choice(self.cached))
        for _ in range(2):
            self.tree.unlock(self.tree.lock(self.match(rng.choice(self.cached))))
        self.tree.evict(EvictParams(num_tokens=0, mamba_num=1))


def bench(n_nodes: int, steps: int = 7) -> tuple[int, float, float, str]:
    """(nodes, full snapshot seconds, median step seconds, what a step carried)."""
    groups = max(1, n_nodes // (PER_GROUP + 1))
    tree_tokens = (PREFIX + SUFFIX * PER_GROUP) * groups
    # Pools a little larger than the tree, as in a loaded engine where the cache fills them.
    scheduler = cpu_cache.build_cache(mamba_slots=groups * PER_GROUP + 64 * steps, kv_size=tree_tokens * 5 // 4 + 4096)
    sink = EventSink()
    restore = cpu_cache.install_hooks(hook_points(sink, ErrorCounter(), StateLog(), HOOKS))
    try:
        work = Workload(scheduler)
        for group in range(groups):
            for _ in range(PER_GROUP):
                work.insert(group)
        capture = Capture(scheduler, sink)
        fulls = []
        for _ in range(3):
            start = time.perf_counter()
            state = capture.full_state(Step(0))
            fulls.append(time.perf_counter() - start)
        rng = random.Random(0)
        times, carried = [], ""
        for i in range(steps):
            work.ten_changes(rng)
            sink.drain(Step(i))
            start = time.perf_counter()
            parts = capture.step(Step(i + 1))
            times.append(time.perf_counter() - start)
            carried = f"{len(parts.upsert_nodes)} nodes, {len(parts.removed_nodes)} removed, {len(parts.slots)} slots"
        return len(state.nodes), min(fulls), statistics.median(times), carried
    finally:
        restore()


def main(sizes: list[int]) -> None:
    print(f"{'nodes':>8} {'full ms':>10} {'step ms':>9} {'step/full':>10}  a step carried")
    for n in sizes:
        nodes, full, step, carried = bench(n)
        print(f"{nodes:>8} {full * 1e3:>10.1f} {step * 1e3:>9.2f} {step / full:>10.4f}  {carried}", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000, 10_000, 100_000])
