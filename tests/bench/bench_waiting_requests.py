"""The request read of a step (held_requests + RequestReader.read, as the step boundary runs it)
with W requests in the scheduler's waiting queue beside a few decoding ones: a saturated
production engine queues hundreds to thousands, and the every-step stream reads every held
request at every step.

sglang 0.5.23's real cache classes on CPU tensors (tests/support/cpu_cache.py), moved by its
own calls (cache_driver.py): 4 requests decode a token each a step; W requests wait with their
prefixes matched, as the scheduler's policy leaves them (no row, no slot). Each W runs in a
child process, first with `--before-site DIR`'s packages first on the path (e.g. main's: `pip
install --no-deps --target DIR .`), then with this tree's; each read with the GC paused as the
step hook pauses it, where the site has that (gc_pause.py). Prints us a read (median and worst
of `--steps`, warm: read after read) and the cyclic GC's collections of its two older
generations during the run (a gen-2 collection walks the whole heap).

`--device-path`: the reader's one-copy path, which a GPU engine's slot tensors take, run on the
same CPU tensors (its Python and dispatch cost, without a device's copy).

Run: `.venv/bin/python tests/bench/bench_waiting_requests.py --before-site DIR [--device-path] [--steps 200] [--waiting 0,100,1000,4000]`
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))

RUNNING = 4
PROMPT = 40


def measure(waiting: int, steps: int, device_path: bool) -> dict[str, float]:
    from mcinspect_engine_hooks.cpu_engine import patches

    patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports
    import torch
    from cache_driver import Driver

    from mcinspect_engine_hooks.pools_0523 import held_requests, session_kv
    from mcinspect_engine_hooks.request_reader import RequestReader

    import cpu_cache

    try:  # the GC paused as the step hook pauses it (a "before" site may predate that)
        from mcinspect_engine_hooks.gc_pause import pause, resume
    except ImportError:
        pause, resume = (lambda: False), (lambda: None)

    class DevicePathReader(RequestReader):
        """The reader as off the host (its one-copy path), on these host tensors."""

        def _host_ints(self, plans: object) -> None:
            return None

    scheduler = cpu_cache.build_cache(mamba_slots=40, kv_size=8192)
    with torch.inference_mode():
        drive = Driver(scheduler)
        decoding = drive.decoding(RUNNING, PROMPT)
        for i in range(waiting):
            drive.queue([1000 + i % 97] + list(range(i % 50, i % 50 + 300)))
        reader = (DevicePathReader if device_path else RequestReader)(scheduler.req_to_token_pool)
        reader.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
        times = []
        collections = [entry["collections"] for entry in gc.get_stats()]
        for step in range(steps):
            for req in decoding:
                drive.decode(req, [step % 50])
            began = time.perf_counter()
            paused = pause()
            reader.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
            if paused:
                resume()
            times.append(time.perf_counter() - began)
        after = [entry["collections"] for entry in gc.get_stats()]
    return {
        "median": 1e6 * statistics.median(times),
        "worst": 1e6 * max(times),
        "gen1": after[1] - collections[1],
        "gen2": after[2] - collections[2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-site", help="packages to run first on the path for the 'before' column")
    parser.add_argument("--steps", type=int, default=200, help="decode steps (at most 256 - 40: the stand-in's row length)")
    parser.add_argument("--waiting", default="0,100,1000,4000", help="waiting requests, comma-separated")
    parser.add_argument(
        "--device-path", action="store_true", help="the reader's path for tensors off the host (a GPU engine's), on these CPU tensors"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.steps, args.device_path)))
        return
    path = "the device path (one copy), on CPU tensors" if args.device_path else "the host path"
    print(
        f"{RUNNING} decoding requests and W waiting, {args.steps} steps, {path}: us a read, median / worst (GC gen-1 / gen-2 collections)"
    )
    print(f"before = {args.before_site or '(none)'}")
    print(f"{'waiting':>7} {'before':>30} {'after':>30} {'ratio':>6}")
    for waiting in (int(w) for w in args.waiting.split(",")):
        sides = []
        for site in (args.before_site, None) if args.before_site else (None,):
            env = dict(os.environ)
            if site:
                env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
            command = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps), "--child", str(waiting)]
            command += ["--device-path"] if args.device_path else []
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            sides.append(json.loads(done.stdout.splitlines()[-1]))
        before, after = sides if len(sides) == 2 else [None, sides[0]]

        def cell(r: dict[str, float] | None) -> str:
            return f"{r['median']:8.0f} / {r['worst']:7.0f} ({r['gen1']:.0f} / {r['gen2']:.0f})" if r else "-"

        ratio = f"{before['median'] / after['median']:5.1f}x" if before else ""
        print(f"{waiting:>7} {cell(before):>30} {cell(after):>30} {ratio:>6}")


if __name__ == "__main__":
    main()
