"""Cache hits against the truth: the same prompts with the radix cache disabled
(mcinspect/differential.py). On nemotron-h the embedded engine is bit-exact when caching is
correct, so the clean run's hits reproduce the uncached logprobs exactly, and #37836 re-created
in sglang's Mamba2 path (`--fault wrong-chunk-state`) makes hits diverge: the real bug's effect
on answers, not only on states.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine_runs import FAULT_MATRIX, opt_in

pytestmark = [pytest.mark.slow, opt_in(FAULT_MATRIX)]  # CI: wrong-chunk-state caught by T2 (test_faults_caught)

BENCH = Path(__file__).parents[1] / "bench" / "bench_differential.py"
REQUESTS = 24


def differential(model: str, fault: str | None) -> dict:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--requests", str(REQUESTS), "--one", f"{model},{fault or ''}"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_nemotron_h_hits_are_bit_exact_clean_and_diverge_under_wrong_chunk_state() -> None:
    clean = differential("nemotron-h", None)
    assert clean["hits"] >= 10, clean
    assert clean["max_abs_logprob_diff_on_hits"] == 0.0 and clean["diverged"] == []
    faulty = differential("nemotron-h", "wrong-chunk-state")
    assert faulty["hits"] >= 10 and faulty["diverged"], faulty
    print(
        f"nemotron-h: clean {clean['hits']} hits bit-exact; wrong-chunk-state: {len(faulty['diverged'])} of {faulty['hits']} hits diverge"
    )
