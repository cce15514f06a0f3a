"""Calibrate T2-recompute's tolerance per oracle: distances of clean runs against faulty ones.

Runs the embedded engine verifying every cached state (MCINSPECT_VERIFY=<oracle>,
MCINSPECT_VERIFY_SHARE=1) under clean configurations (extra_buffer page 16 and page 1,
extra_buffer_lazy page 16, no_buffer page 1) and under the content faults whose first check is
T2 (`wrong-chunk-state` #37836, `unwritten-slot` #30862), each in its own process (one engine at
a time), and collects every verified slot's distances from the engine's delta history. Prints
per component the clean maximum, the faulty runs' minimum above it, the margin, and what a
reference cost.

Run: `.venv/bin/python tests/bench/calibrate_t2.py [--oracle engine|transformers] [--requests 40]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

RUNS: list[tuple[str, str, int, str | None]] = [
    ("clean extra_buffer p16", "extra_buffer", 16, None),
    ("clean extra_buffer p1", "extra_buffer", 1, None),
    ("clean extra_buffer_lazy p16", "extra_buffer_lazy", 16, None),
    ("clean no_buffer p1", "no_buffer", 1, None),
    ("fault wrong-chunk-state p16", "extra_buffer", 16, "wrong-chunk-state"),
    ("fault unwritten-slot p16", "extra_buffer", 16, "unwritten-slot"),
]


def run_one(strategy: str, page_size: int, fault: str | None, requests: int, port: int, oracle: str) -> dict:
    """In a fresh process: one demo with verification; returns its distances and timings."""
    from mcinspect.client import request
    from mcinspect.demo import run_demo
    from mcinspect.schema import SCHEMA_VERSION, GetHistory, GetStats, History, InsertEvent
    from mcinspect.target import Target
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

    found: dict = {}
    os.environ["MCINSPECT_VERIFY_SHARE"] = "1"  # every state, as soon as it can be read
    os.environ["MCINSPECT_CAPTURE"] = "every-step"  # the history holds every step's delta

    def collect(summary: object) -> None:
        reply = request(Target("127.0.0.1", port), GetHistory(schema_version=SCHEMA_VERSION, after_seq=0))
        assert isinstance(reply, History), reply
        found["oldest_seq"] = reply.oldest_seq
        distances = {}
        for delta in reply.deltas:
            for slot, content in delta.contents.items():
                if content.recompute_temporal_rel_l2 == -1.0 or content.recompute_oracle != oracle:
                    continue
                distances[(slot, content.fingerprint, content.step)] = (content.recompute_conv_rel_l2, content.recompute_temporal_rel_l2)
        found["distances"] = list(distances.values())
        found["inserted"] = sum(isinstance(e, InsertEvent) for delta in reply.deltas for e in delta.events)
        stats = request(Target("127.0.0.1", port), GetStats(schema_version=SCHEMA_VERSION))
        found["seconds"], found["verified"] = stats.verify.seconds, stats.verify.verified

    config = EmbeddedEngineConfig(strategy=strategy, page_size=page_size, fault=fault, inspector_port=port, verify=oracle)
    began = time.perf_counter()
    summary = run_demo(config, requests, after_workload=collect)
    return {**found, "workload_s": summary.workload_s, "wall_s": time.perf_counter() - began}


def oracle_cost(lengths: list[int]) -> float:
    """Seconds per prefix state of the oracle (the dominant cost of verifying one slot)."""
    from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle
    from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model

    oracle = RecomputeOracle(ensure_tiny_model())
    oracle.state([3, 4, 5])  # first call pays one-time set-up
    began = time.perf_counter()
    for i, length in enumerate(lengths):
        oracle.state([(7 * t + i) % 500 + 3 for t in range(length)])
    return (time.perf_counter() - began) / len(lengths)


def summarize(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: none"
    q = sorted(values)
    pct = lambda p: q[min(len(q) - 1, int(p * len(q)))]  # noqa: E731
    return (
        f"{name}: n={len(q)} min={q[0]:.3g} p10={pct(0.1):.3g} median={statistics.median(q):.3g} "
        f"p90={pct(0.9):.3g} max={q[-1]:.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--oracle", choices=("engine", "transformers"), default="engine")
    parser.add_argument("--port", type=int, default=47310)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child mode: strategy,page,fault
    args = parser.parse_args()
    if args.one:
        strategy, page, fault = args.one.split(",")
        print(json.dumps(run_one(strategy, int(page), fault or None, args.requests, args.port, args.oracle)))
        return
    results = {}
    for name, strategy, page, fault in RUNS:
        child = [sys.executable, __file__, "--requests", str(args.requests), "--port", str(args.port), "--oracle", args.oracle, "--one", f"{strategy},{page},{fault or ''}"]
        out = subprocess.run(child, capture_output=True, text=True, check=True).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
        r = results[name]
        print(f"{name}: {len(r['distances'])} verified of {r['inserted']} inserted states, workload {r['workload_s']:.1f} s, history from seq {r['oldest_seq']}")
    clean = [d for name, r in results.items() if name.startswith("clean") for d in r["distances"]]
    faulty = [d for name, r in results.items() if name.startswith("fault") for d in r["distances"]]
    for metric, index in (("conv rel_l2", 0), ("temporal rel_l2", 1)):
        print(f"--- {metric}")
        for name, r in results.items():
            print(summarize(f"  {name}", [d[index] for d in r["distances"]]))
        clean_max = max(d[index] for d in clean)
        above = sorted(d[index] for d in faulty if d[index] > clean_max)
        print(f"  clean max {clean_max:.3g}; faulty run: {len(above)}/{len(faulty)} slots above it")
        if above:
            print(summarize("  faulty above clean max", above) + f"; margin (faulty min / clean max) {above[0] / clean_max:.3g}x")
    seconds = sum(r["seconds"] for r in results.values())
    verified = sum(r["verified"] for r in results.values())
    print(f"{args.oracle} oracle: {verified} references, {1000 * seconds / max(verified, 1):.1f} ms each on the scheduler thread")
    if args.oracle == "transformers":
        print(f"oracle cost per prefix (lengths 64..512): {oracle_cost([64, 128, 256, 384, 512]) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
