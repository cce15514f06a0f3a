"""Differential runs per model family: output logprobs on cache hits vs the same prompts with the
radix cache disabled (mcinspect/differential.py), clean and under the content faults.

Prints, per family and fault: requests that hit the cache, the largest |logprob difference| on
them (0.0: bit-exact), and how many diverged. Each run starts two engines, one at a time, in
its own process.

Run: `.venv/bin/python tests/bench/bench_differential.py [--requests 40] [--families nemotron-h]`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

FAULTS = (None, "wrong-chunk-state", "zero-initial-state", "unwritten-slot")


def run_one(model: str, fault: str | None, requests: int) -> dict:
    """In this process: one differential run; its report as plain data."""
    from mcinspect.differential import differential_run
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

    report = differential_run(EmbeddedEngineConfig(model=model, fault=fault), requests)
    return {
        "requests": report.requests,
        "hits": report.requests_with_hits,
        "max_abs_logprob_diff_on_hits": report.max_abs_logprob_diff_on_hits,
        "diverged": [(d.index, d.kind, d.first_position) for d in report.divergences],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--families", default="qwen3-next,nemotron-h,qwen3.5")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child mode: model,fault
    args = parser.parse_args()
    if args.one:
        model, fault = args.one.split(",")
        print(json.dumps(run_one(model, fault or None, args.requests)))
        return
    for model in args.families.split(","):
        for fault in FAULTS:
            child = [sys.executable, __file__, "--requests", str(args.requests), "--one", f"{model},{fault or ''}"]
            r = json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
            print(
                f"{model:11} {fault or 'clean':19} hits {r['hits']:3}/{r['requests']}, max |logprob diff| on hits "
                f"{r['max_abs_logprob_diff_on_hits']:.3g}, diverged {len(r['diverged'])}"
            )


if __name__ == "__main__":
    main()
