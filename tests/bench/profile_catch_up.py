"""Each step of a 100k-node catch-up, timed and split: where a catch-up step's time goes.

In-process, single-threaded, on sglang's real UnifiedRadixCache (Python tree core, CPU pools)
built as in bench_client_stalls.py: a capture (CATCH_UP_BUDGET_S a step) takes a full state of
the first group, the tree then grows to N nodes unwatched, and the capture catches up while
each step makes 10 cache changes (bench_capture.Workload). Then the same after a dirty-mark
overflow. Per catch-up, it prints the number of steps to publish and the worst steps, each
split into the sections of `Capture.step` (perf_counter around its methods).

    .venv/bin/python tests/bench/profile_catch_up.py [N_NODES] [--cprofile]

`--cprofile` prints a cProfile of the first, the last and the worst other step of each catch-up (which slows every step).
"""

from __future__ import annotations

import cProfile
import gc
import io
import os
import pstats
import random
import sys
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))

from mcinspect_engine_hooks.cpu_engine import patches  # noqa: E402

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import bench_capture  # noqa: E402

from mcinspect.schema import Step  # noqa: E402
from mcinspect_engine_hooks.capture import Capture  # noqa: E402
from mcinspect_engine_hooks.catch_up import CATCH_UP_BUDGET_S  # noqa: E402
from mcinspect_engine_hooks.events import EventSink, hook_points  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_0523 import HOOKS  # noqa: E402
from mcinspect_engine_hooks.state_log import StateLog  # noqa: E402

import cpu_cache  # noqa: E402

SECTIONS = ("_marked_nodes", "_read_free", "_advance", "_read_nodes", "_reclaim", "_apply_requests", "_move_owners", "published")
"""Capture methods timed within a step (nested ones count in their caller too)."""
COUNTED = {"_read_nodes": "nodes", "_reclaim": "slots"}
"""Sections whose first argument is counted (shown without "ms")."""


def split_text(split: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.0f}" if k in COUNTED.values() else f"{k} {v * 1e3:.1f}" for k, v in split.items())


def timed_sections(capture: Capture, into: dict[str, float]) -> None:
    for owner, name in [(capture, name) for name in SECTIONS] + [(capture._kv_reader, "read")]:
        method = getattr(owner, name)

        def wrapper(*args: Any, _method: Callable[..., Any] = method, _name: str = name, **kwargs: Any) -> Any:
            if _name in COUNTED:  # its first argument: the nodes read, the slots rebuilt
                into[COUNTED[_name]] = into.get(COUNTED[_name], 0) + len(list(args[0]))
            began = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                into[_name] = into.get(_name, 0.0) + time.perf_counter() - began

        setattr(owner, name, wrapper)


def run_catch_up(label: str, capture: Capture, work: Any, rng: random.Random, step: int, cprofile: bool) -> int:
    into: dict[str, float] = {}
    timed_sections(capture, into)
    gc_began = [0.0]

    def gc_timer(phase: str, info: dict[str, int]) -> None:  # cyclic collections inside the step
        if phase == "start":
            gc_began[0] = time.perf_counter()
        else:
            into["gc"] = into.get("gc", 0.0) + time.perf_counter() - gc_began[0]

    gc.callbacks.append(gc_timer)
    walls: list[tuple[float, dict[str, float], int]] = []
    worst_profile = (0.0, "")
    n = 0
    while True:
        n += 1
        work.ten_changes(rng)
        into.clear()
        profiler = cProfile.Profile() if cprofile else None
        began = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        parts = capture.step(Step(step + n))
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - began
        walls.append((wall, dict(into), n))
        if profiler is not None and (wall > worst_profile[0] or n == 1 or parts is not None):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
            if n == 1 or parts is not None:
                print(f"  cProfile of step {n}:\n{text.getvalue()}")
            else:
                worst_profile = (wall, f"  cProfile of the worst other step ({n}):\n{text.getvalue()}")
        if parts is not None:
            break
        if n >= 5000:
            print(f"{label}: not published after {n} steps")
            break
    ms = sorted(w for w, _, _ in walls)
    print(f"{label}: {n} steps to publish; step ms: median {ms[len(ms) // 2] * 1e3:.1f}, max {ms[-1] * 1e3:.1f}")
    nodes, slots = (sum(split.get(key, 0) for _, split, _ in walls) for key in ("nodes", "slots"))
    print(f"  read {nodes:.0f} nodes, rebuilt {slots:.0f} slots in all")
    print(f"  first step {walls[0][0] * 1e3:.1f} ms: " + split_text(walls[0][1]))
    print(f"  last step {walls[-1][0] * 1e3:.1f} ms: " + split_text(walls[-1][1]))
    for wall, split, i in sorted(walls, key=lambda w: w[0], reverse=True)[:4]:
        print(f"  worst: step {i} {wall * 1e3:.1f} ms: " + split_text(split))
    if worst_profile[1]:
        print(worst_profile[1])
    for extra in range(1, 4):  # the ordinary steps after it
        work.ten_changes(rng)
        into.clear()
        began = time.perf_counter()
        capture.step(Step(step + n + extra))
        print(f"  step {n + extra} after it: {(time.perf_counter() - began) * 1e3:.1f} ms: {split_text(into)}")
    n += 3
    gc.callbacks.remove(gc_timer)
    for name in SECTIONS:  # unwrap
        capture.__dict__.pop(name, None)
    capture._kv_reader.__dict__.pop("read", None)
    return step + n


def main(args: list[str]) -> None:
    n_nodes = int(next((a for a in args if not a.startswith("--")), "100000"))
    cprofile = "--cprofile" in args
    groups = max(1, n_nodes // (bench_capture.PER_GROUP + 1))
    tree_tokens = (bench_capture.PREFIX + bench_capture.SUFFIX * bench_capture.PER_GROUP) * groups
    spare = 40_000
    scheduler = cpu_cache.build_cache(mamba_slots=groups * bench_capture.PER_GROUP + spare, kv_size=tree_tokens * 5 // 4 + spare * 16)
    sink = EventSink()
    cpu_cache.install_hooks(hook_points(sink, ErrorCounter(), StateLog(), HOOKS))
    work = bench_capture.Workload(scheduler)
    capture = Capture(scheduler, sink, budget_s=CATCH_UP_BUDGET_S)
    for _ in range(bench_capture.PER_GROUP):
        work.insert(0)
    capture.full_state(Step(0))
    began = time.perf_counter()
    for group in range(1, groups):
        for _ in range(bench_capture.PER_GROUP):
            work.insert(group)
    gc.collect()
    print(f"{len(scheduler.tree_cache.tree_core._node_arena)} nodes built in {time.perf_counter() - began:.0f} s")
    rng = random.Random(0)
    step = run_catch_up("grown unwatched", capture, work, rng, 0, cprofile)
    max_dirty, sink.max_dirty = sink.max_dirty, 0
    work.ten_changes(rng)
    sink.max_dirty = max_dirty
    run_catch_up("overflow", capture, work, rng, step, cprofile)


if __name__ == "__main__":
    main(sys.argv[1:])
