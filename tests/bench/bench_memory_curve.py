"""How long each tiny model remembers a wrong state: perturbed vs clean mamba state distance.

For every model family: a 128-token prefix, its mamba states replaced by zeros (#29368: a hit's
suffix run from a blank state) or by another prefix's states (#37836: the wrong chunk state
cached), the attention KV left right; then the same tokens fed to both. Prints the relative L2
of the temporal states (all mamba layers, as T2 measures it) after 0, 16, 64 and 256 further
tokens, and that distance over T2's tolerance (the issue asks >= 10x after 256 tokens).

Run: `.venv/bin/python tests/bench/bench_memory_curve.py [--seeds 3]`.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from memory_curve import CHECKPOINTS, PERTURBATIONS, memory_curve  # noqa: E402  (tests/support)

from mcinspect.checks.recompute import tolerances  # noqa: E402

TOLERANCE = tolerances("engine", "extend")["temporal"]
"""The tightest T2 tolerance: the engine oracle's for a state a prefill wrote."""
from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle  # noqa: E402
from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model  # noqa: E402
from mcinspect_engine_hooks.families import FAMILIES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="prefixes per family and perturbation (the minimum is printed)")
    args = parser.parse_args()
    print(f"relative L2 (temporal) after {', '.join(map(str, CHECKPOINTS))} tokens; T2 tolerance {TOLERANCE:g}")
    for family in FAMILIES:
        oracle = RecomputeOracle(ensure_tiny_model(family))
        for perturbation in PERTURBATIONS:
            curves = [memory_curve(oracle, perturbation, seed=seed) for seed in range(args.seeds)]
            low = [min(curve[i] for curve in curves) for i in range(len(CHECKPOINTS))]
            print(
                f"{family:11} {perturbation:12} "
                + "  ".join(f"{d:6.3f}" for d in low)
                + f"   after {CHECKPOINTS[-1]}: {low[-1] / TOLERANCE:.1f}x the tolerance"
            )


if __name__ == "__main__":
    main()
