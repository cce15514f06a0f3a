"""The fault library against the checks, on the real engine: each fault reproduced by
patching sglang is reported by the check meant to catch it, and a clean run with the same
workload reports nothing (`mcinspect demo --record` then `mcinspect check`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from engine_runs import MCINSPECT, free_port_pair

from mcinspect_engine_hooks.cpu_engine.faults import FAULTS

pytestmark = pytest.mark.slow

REQUESTS = 40


def record_and_check(tmp_path: Path, *demo_args: str) -> tuple[list[dict], dict]:
    recording = tmp_path / "run.mcrec"
    demo = subprocess.run(
        [MCINSPECT, "demo", "--json", "--requests", str(REQUESTS), "--port", str(free_port_pair()), "--record", str(recording), *demo_args],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-3000:]
    check = subprocess.run([MCINSPECT, "check", str(recording), "--json"], capture_output=True, text=True, timeout=300)
    assert check.returncode in (0, 1), check.stderr[-3000:]
    violations = [json.loads(line) for line in check.stdout.splitlines()]
    assert (check.returncode == 1) == bool(violations)
    return violations, json.loads(demo.stdout)


@pytest.mark.parametrize("fault", ["double-owner", "leak-slot", "wrong-chunk-state"])
def test_fault_is_caught_by_its_check(fault: str, tmp_path: Path) -> None:
    spec = FAULTS[fault]
    args = ["--fault", fault] + (["--verify"] if "T2-recompute" in spec.expected_checks else [])
    violations, _ = record_and_check(tmp_path, *args)
    fired = {v["check"] for v in violations}
    assert spec.expected_checks[0] in fired, f"{fault}: expected {spec.expected_checks[0]}, got {sorted(fired)}"


def test_clean_run_has_no_violations(tmp_path: Path) -> None:
    violations, summary = record_and_check(tmp_path, "--verify")
    assert summary["stats"]["evicted_mamba_slots"] > 0  # the run did exercise eviction
    assert violations == []
