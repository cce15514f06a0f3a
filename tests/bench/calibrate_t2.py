"""Calibrate T2-recompute's tolerances per oracle and model family: recompute distances of clean
runs against faulty ones, and the violations every clean run reports.

For each family, runs `mcinspect demo --verify ORACLE --record` with every cached state verified
(MCINSPECT_VERIFY_SHARE=1) under each strategy x page size, clean, and with the content faults
T2 is meant to catch (wrong-chunk-state #37836, zero-initial-state #29368, unwritten-slot
#30862) on extra_buffer page 16; one engine at a time. Reads every verified slot's distances
from the recording, by tolerance class (the engine oracle's tolerance depends on the forward
that wrote the state: a prefill, or decode steps), runs `mcinspect check` on it, and prints per
run the verified / inserted states, the largest distances, the violations by check and the
throughput; per class and component the clean maximum, the faulty states above it, the margin
(faulty min / clean max), and the tolerance's place between them.

Run: `.venv/bin/python tests/bench/calibrate_t2.py [--oracle engine|transformers] [--requests 200]
[--families nemotron-h]`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from engine_runs import MCINSPECT, free_port_pair  # noqa: E402  (tests/support)

CONFIGS = [("extra_buffer", 16), ("extra_buffer", 1), ("no_buffer", 1), ("extra_buffer_lazy", 16)]
FAULTS = ("wrong-chunk-state", "zero-initial-state", "unwritten-slot")


def tolerance_class(oracle: str, forward: str) -> str:
    """The key of TOLERANCE_REL_L2 that judges a state `forward` wrote."""
    return "transformers" if oracle != "engine" else "engine" if forward == "extend" else "engine-decoded"


def run_one(model: str, strategy: str, page_size: int, fault: str | None, requests: int, oracle: str) -> dict:
    """One recorded demo with verification; its distances by tolerance class, violations, figures."""
    from mcinspect.checks.recompute import forward_of, is_verified
    from mcinspect.recording import RecordingReader
    from mcinspect.schema import Delta, InsertEvent

    with tempfile.TemporaryDirectory() as scratch:
        recording = os.path.join(scratch, "run.mcrec")
        command = [
            MCINSPECT, "demo", "--headless", "--json", "--verify", oracle, "--record", recording, "--requests", str(requests),
            "--port", str(free_port_pair()), "--model", model, "--strategy", strategy, "--page-size", str(page_size),
        ] + (["--fault", fault] if fault else [])  # fmt: skip
        began = time.perf_counter()
        env = {**os.environ, "MCINSPECT_VERIFY_SHARE": "1", "MCINSPECT_VERIFY_RATE": "1000"}  # every state
        demo = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        wall_s = time.perf_counter() - began
        summary = json.loads(demo.stdout)
        distances, inserted = {}, 0
        for frame in RecordingReader(recording):
            contents = frame.contents if isinstance(frame, Delta) else frame.state.contents
            inserted += sum(isinstance(e, InsertEvent) for e in frame.events) if isinstance(frame, Delta) else 0
            for slot, content in contents.items():
                if is_verified(content) and content.recompute_oracle == oracle:
                    key = (slot, content.fingerprint, content.step)
                    distances[key] = (
                        tolerance_class(oracle, forward_of(content)),
                        content.recompute_conv_rel_l2,
                        content.recompute_temporal_rel_l2,
                    )
        check = subprocess.run([MCINSPECT, "check", recording, "--json"], capture_output=True, text=True)
    violations = collections.Counter(json.loads(line)["check"] for line in check.stdout.splitlines())
    return {
        "distances": list(distances.values()),
        "inserted": inserted,
        "violations": dict(violations),
        "requests": summary["requests"],
        "engine_start_s": summary["engine_start_s"],
        "workload_s": summary["workload_s"],
        "generated_tokens_per_s": summary["generated_tokens_per_s"],
        "processed_tokens_per_s": summary["processed_tokens_per_s"],
        "wall_s": wall_s,
    }


def oracle_cost(model: str, lengths: list[int]) -> float:
    """Seconds per prefix state of the oracle (the dominant cost of verifying one slot)."""
    from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle
    from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model

    oracle = RecomputeOracle(ensure_tiny_model(model))
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
    return f"{name}: n={len(q)} min={q[0]:.3g} p10={pct(0.1):.3g} median={statistics.median(q):.3g} p90={pct(0.9):.3g} max={q[-1]:.3g}"


def main() -> None:
    from mcinspect.checks.recompute import COMPONENTS, TOLERANCE_REL_L2

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--oracle", choices=("engine", "transformers"), default="engine")
    parser.add_argument("--families", default="qwen3-next,nemotron-h,qwen3.5")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child mode: model,strategy,page,fault
    args = parser.parse_args()
    if args.one:
        model, strategy, page, fault = args.one.split(",")
        print(json.dumps(run_one(model, strategy, int(page), fault or None, args.requests, args.oracle)))
        return
    overall: dict[tuple[str, str], tuple[list[float], list[float]]] = collections.defaultdict(lambda: ([], []))
    for model in args.families.split(","):
        runs = [(f"clean {s} p{p}", s, p, None) for s, p in CONFIGS] + [(f"{f} extra_buffer p16", "extra_buffer", 16, f) for f in FAULTS]
        results = {}
        for name, strategy, page, fault in runs:
            child = [
                sys.executable,
                __file__,
                "--requests",
                str(args.requests),
                "--oracle",
                args.oracle,
                "--one",
                f"{model},{strategy},{page},{fault or ''}",
            ]
            r = json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
            results[name] = r
            worst = [max((d[i] for d in r["distances"]), default=0.0) for i in (1, 2)]
            print(
                f"{model} {name}: {r['requests']} requests, {len(r['distances'])} verified of {r['inserted']} inserted, "
                f"max conv {worst[0]:.3g} temporal {worst[1]:.3g}, violations {r['violations'] or 0}, "
                f"engine start {r['engine_start_s']:.1f} s, {r['generated_tokens_per_s']:.0f} tok/s generated "
                f"({r['processed_tokens_per_s']:.0f} computed), wall {r['wall_s']:.0f} s",
                flush=True,
            )
        classes = sorted({d[0] for r in results.values() for d in r["distances"]})
        for cls in classes:
            for index, component in enumerate(COMPONENTS, start=1):
                clean = [d[index] for name, r in results.items() if name.startswith("clean") for d in r["distances"] if d[0] == cls]
                faulty = [d[index] for name, r in results.items() if not name.startswith("clean") for d in r["distances"] if d[0] == cls]
                overall[(cls, component)][0].extend(clean)
                overall[(cls, component)][1].extend(faulty)
                clean_max = max(clean, default=0.0)
                above = sorted(v for v in faulty if v > clean_max)
                print("  " + summarize(f"{model} {cls} {component} clean", clean))
                line = f"  {model} {cls} {component}: clean max {clean_max:.3g}; faulty runs: {len(above)}/{len(faulty)} verified states above it"
                if above and clean_max > 0:
                    line += f", min {above[0]:.3g}, margin (faulty min / clean max) {above[0] / clean_max:.3g}x"
                print(line)
        if args.oracle == "transformers":
            print(
                f"  {model}: oracle cost per prefix (lengths 64..512): {oracle_cost(model, [64, 128, 256, 384, 512]) * 1000:.0f} ms",
                flush=True,
            )
    for (cls, component), (clean, faulty) in sorted(overall.items()):
        tolerance = TOLERANCE_REL_L2[cls][component]
        print(
            f"all families, {cls} {component}: clean max {max(clean, default=0.0):.3g}, tolerance {tolerance:g}; "
            f"faulty states above the tolerance: {sum(v > tolerance for v in faulty)}/{len(faulty)}"
        )


if __name__ == "__main__":
    main()
