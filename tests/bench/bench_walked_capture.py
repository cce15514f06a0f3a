"""Every-step captures of the real caches that keep no node arena (sglang 0.5.10-0.5.15's
MambaRadixCache, 0.5.16's UnifiedRadixCache) with the release's whole hook table bound as the
plugin binds it, the tree grown unwatched and then changed between steps through the cache's
own insert, match and evict. Per tree size: the catch-up after the unwatched growth (steps
until it published, its worst step), then every-step captures (steps published, median and
worst step), each published state checked against a full walk. Without the dirty-mark rows
(`--before-site` of a main before them: mrc_marks, marks_0516) every capture walks and re-reads
the whole tree in its step.

Runs in the release venv (`bash scripts/setup-release-venv.sh 0.5.15`, or 0.5.16):
`.venv-sglang-0.5.15/bin/python tests/bench/bench_walked_capture.py [--steps 30] [--before-site DIR] 1000 10000 100000`
(`--before-site DIR`: each size also with the packages installed in DIR first on the path, e.g.
`pip install --no-deps --target DIR` of the main branch; before / after in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))


def measure(inserts: int, steps: int) -> dict[str, float | int | bool]:
    """One size in this process: the tree grown by `inserts` inserts, then `steps` captures."""
    from mcinspect_engine_hooks.cpu_engine import patches

    patches.install()
    import unified_0516_cache

    from mcinspect.schema import Counters, Seq, Step, apply_delta
    from mcinspect_engine_hooks.capture import Capture
    from mcinspect_engine_hooks.catch_up import CATCH_UP_BUDGET_S
    from mcinspect_engine_hooks.events import EventSink, hook_points
    from mcinspect_engine_hooks.generations import MAMBA_RADIX_CACHE, select
    from mcinspect_engine_hooks.guard import ErrorCounter
    from mcinspect_engine_hooks.state_log import StateLog

    import mrc_cache
    from cpu_cache import install_hooks

    selection = select()
    generation = selection.generation
    slots = inserts + 4 * steps + 100  # a slot an insert
    if generation is MAMBA_RADIX_CACHE:
        tree, scheduler_of = mrc_cache.GrowingTree(mrc_cache.build_cache(mamba_slots=slots)), mrc_cache.scheduler_of
    else:  # 0.5.16: its real pools (a few KV tokens an insert)
        cache = unified_0516_cache.build_cache(mamba_slots=slots, kv_tokens=8 * slots)
        tree, scheduler_of = unified_0516_cache.GrowingTree(cache), unified_0516_cache.scheduler_of
    scheduler = scheduler_of(tree.cache)
    sink = EventSink()
    install_hooks(hook_points(sink, ErrorCounter(), StateLog(), selection.hooks))
    capture = Capture(scheduler, sink, generation, budget_s=CATCH_UP_BUDGET_S)
    published = capture.full_state(Step(0))
    for _ in range(inserts):
        tree.insert()
    nodes = len(capture._view.arena())

    def full_read(step: int) -> object:
        bare = EventSink()  # no hooks: a walk (with the tombstones the hooks saw made: sglang keeps none)
        bare.tombstones = set(sink.tombstones)
        return Capture(scheduler, bare, generation).full_state(Step(step))

    n, catch_up, parts = 0, [], None
    while parts is None:  # the growth nobody watched: one delta, maybe spread over steps
        n += 1
        began = time.perf_counter()
        parts = capture.step(Step(n))
        catch_up.append(time.perf_counter() - began)
    apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
    equal = published == full_read(n)
    times, count = [], 0
    for _ in range(steps):
        tree.change(n)
        n += 1
        began = time.perf_counter()
        parts = capture.step(Step(n))
        times.append(time.perf_counter() - began)
        if parts is not None:
            count += 1
            apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
            equal &= published == full_read(n)
    return dict(
        nodes=nodes, catch_up_steps=len(catch_up), catch_up_worst_ms=1e3 * max(catch_up), published=count,
        median_ms=1e3 * statistics.median(times), worst_ms=1e3 * max(times), equal=equal,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inserts", type=int, nargs="+", help="Tree sizes, as inserts (each adds a node or two).")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--before-site", help="Also run each size with the packages in this directory first on the path.")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child run: print one size's figures as JSON
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.steps)))
        return
    import importlib.metadata

    print(f"sglang {importlib.metadata.version('sglang')}, {args.steps} every-step captures per tree after its catch-up")
    print(
        f"{'tree':<24} {'nodes':>7} {'catch-up steps':>14} {'its worst ms':>12} {'published':>10} {'median ms':>10} {'worst ms':>9}  equal to full walks"
    )
    for inserts in args.inserts:
        for site in [args.before_site, None] if args.before_site else [None]:
            env = dict(os.environ)
            if site:
                env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
            command = [sys.executable, __file__, "--one", str(inserts), "--steps", str(args.steps), "0"]
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
            if done.returncode != 0:
                raise SystemExit(f"{inserts} inserts: {done.stderr.strip().splitlines()[-1]}")
            r = json.loads(done.stdout.strip().splitlines()[-1])
            label = f"{inserts} inserts" + ((" (before)" if site else " (after)") if args.before_site else "")
            print(
                f"{label:<24} {r['nodes']:>7} {r['catch_up_steps']:>14} {r['catch_up_worst_ms']:>12.1f} "
                f"{r['published']:>4} of {args.steps:<3} {r['median_ms']:>10.1f} {r['worst_ms']:>9.1f}  {r['equal']}"
            )


if __name__ == "__main__":
    main()
