"""Run a fault (or a clean workload) on the embedded engine and judge what the checks report:
shared by test_faults_caught (sglang 0.5.23) and test_releases (the other supported releases,
each through its own venv's `mcinspect`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from mcinspect_engine_hooks.cpu_engine.faults import FAULTS, RECOMPUTE_CHECK
from mcinspect_engine_hooks.cpu_engine.faults.base import LOG_ENV
from mcinspect_engine_hooks.families import DEFAULT_FAMILY

from engine_runs import MCINSPECT, free_ports_for_ranks

REQUESTS = 24
"""Every fault's first action in CI comes within the first 30 steps; a run lasts about 110."""
CASES = [
    # every fault once, on the default model where it exists there, the strategies and page
    # sizes in turn (the matrix adds every family x configuration x tree core) ...
    ("unwritten-slot", DEFAULT_FAMILY, "extra_buffer_lazy", 16),
    ("track-off-by-one", DEFAULT_FAMILY, "extra_buffer", 1),
    ("depth-mismatch", DEFAULT_FAMILY, "no_buffer", 1),
    ("leak-slot", DEFAULT_FAMILY, "extra_buffer_lazy", 16),
    ("double-owner", DEFAULT_FAMILY, "extra_buffer", 1),
    ("overwrite-cached", DEFAULT_FAMILY, "extra_buffer", 16),
    ("ghost-node", DEFAULT_FAMILY, "extra_buffer_lazy", 16),
    ("dropped-cow", DEFAULT_FAMILY, "extra_buffer", 16),
    ("mixed-track-dropped", DEFAULT_FAMILY, "extra_buffer", 16),
    ("decode-write-to-padding", DEFAULT_FAMILY, "extra_buffer_lazy", 16),
    ("stray-track-write", DEFAULT_FAMILY, "extra_buffer", 1),
    ("tp-desync", DEFAULT_FAMILY, "extra_buffer", 16),  # with --tp 2 (fault_runs)
    # ... and the two Mamba2 bugs in sglang's real Mamba2 code path (re-created on GDN: the matrix)
    ("wrong-chunk-state", "nemotron-h", "extra_buffer", 16),
    ("zero-initial-state", "nemotron-h", "extra_buffer", 16),
]
IN_CI = ("unwritten-slot", "depth-mismatch", "wrong-chunk-state")
"""CI's time budget: one fault of each kind of catch on the engine (write-ran from the forward's
writes, T2 on no_buffer's copies, T2 on sglang's real Mamba2 path: #37836), the rest with
MCINSPECT_FAULT_MATRIX=1. Each one's effect on the real sglang classes stays in CI
(tests/unit/test_faults.py), mixed-track-dropped's mechanism is caught in CI as the real bug of
the unpatched sglang 0.5.22 (test_releases), and tp-agree on two real ranks' recordings in the
TUI and unit tests (tests/tui/test_ranks.py, tests/unit/test_cross_rank.py)."""
DETECTION_STEPS = 3
VERIFY_ENV = {"MCINSPECT_VERIFY_SHARE": "1", "MCINSPECT_VERIFY_RATE": "1000", "MCINSPECT_VERIFY_WORKING": "0.5"}
"""The engine oracle verifies every state as soon as it can be read, and samples working states
for half its references: detection is measured from the state's first chance to be read."""
RECOMPUTE_CHECKS = (RECOMPUTE_CHECK, "T2-working-state")
BLIND_UNDER_NO_BUFFER = ("state-depth", "write-ran")
"""no_buffer caches copies of the working slot: no tracked depth, no track writes to judge."""


def first_check_that_sees(fault: str, strategy: str) -> str:
    """The first of the fault's expected checks that can see it under `strategy`."""
    expected = FAULTS[fault].expected_checks
    return next(c for c in expected if not (strategy == "no_buffer" and c in BLIND_UNDER_NO_BUFFER))


def record_and_check(
    tmp_path: Path,
    *demo_args: str,
    env: dict[str, str] | None = None,
    requests: int = REQUESTS,
    mcinspect: str = MCINSPECT,
    stopped_by: str = "",
) -> tuple[list[dict], dict]:
    """`stopped_by`: sglang's own check stops the engine with this message, and the recording
    made until then is checked (each frame is flushed as it comes); the summary is then {}."""
    recording = tmp_path / "run.mcrec"
    demo = subprocess.run(
        [mcinspect, "demo", "--json", "--requests", str(requests), "--port", str(free_ports_for_ranks(2)), "--record", str(recording), *demo_args],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    if stopped_by:
        assert demo.returncode != 0 and stopped_by in demo.stderr, demo.stderr[-3000:]
    else:
        assert demo.returncode == 0, demo.stderr[-3000:]
    # one object per occurrence: the first occurrence's step of each check is what is timed
    check = subprocess.run([mcinspect, "check", str(recording), "--json", "--ungrouped"], capture_output=True, text=True, timeout=300)
    assert check.returncode in (0, 1), check.stderr[-3000:]
    violations = [json.loads(line) for line in check.stdout.splitlines()]
    assert (check.returncode == 1) == bool(violations)
    return violations, json.loads(demo.stdout) if not stopped_by else {}


def assert_fault_caught(
    tmp_path: Path,
    fault: str,
    model: str,
    strategy: str,
    page_size: int,
    tree_core: str = "python",
    mcinspect: str = MCINSPECT,
    stopped_by: str = "",
) -> None:
    """The engine oracle alone for the faults a recompute catches first (the transformers oracle
    off); no recompute at all for the others: they are caught at the step, from metadata.
    `stopped_by`: sglang's own check stops the engine with that message (record_and_check)."""
    spec = FAULTS[fault]
    log = tmp_path / "faults.jsonl"
    args = ["--model", model, "--fault", fault, "--strategy", strategy, "--page-size", str(page_size)]
    args += ["--tree-core", tree_core, "--verify", "engine" if first_check_that_sees(fault, strategy) in RECOMPUTE_CHECKS else "off"]
    args += ["--mixed-chunk"] if "mixed-chunk" in spec.requires else []
    args += ["--tp", "2"] if "tp" in spec.requires else []
    env = {**os.environ, **VERIFY_ENV, LOG_ENV: str(log)}
    violations, summary = record_and_check(tmp_path, *args, env=env, mcinspect=mcinspect, stopped_by=stopped_by)
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    assert actions and all(a["fault"] == fault and a["step"] is not None for a in actions)
    first = min(a["step"] for a in actions)
    if "tp" in spec.requires:  # both ranks listed and recorded; they agreed until the fault acted
        assert len(summary["rank_ports"]) == 2 and (tmp_path / "run.rank1.mcrec").exists(), summary["rank_ports"]
        assert not [v for v in violations if v["step"] < first], violations[:3]
    # the first of the checks meant for it (state-depth cannot see no_buffer's states: T2 does)
    caught = sorted((v for v in violations if v["check"] in spec.expected_checks), key=lambda v: v["step"])
    assert caught, f"{fault}: expected {spec.expected_checks}, got {sorted({v['check'] for v in violations})}"
    detection = caught[0]
    print(
        f"{fault} {model} {strategy} page {page_size} {tree_core}: first action at step {first}, {detection['check']} at +{detection['step'] - first}"
    )
    assert 0 <= detection["step"] - first <= DETECTION_STEPS, f"{fault}: first action at step {first}, caught at {detection}"
    touched = {
        "slots": {a["slot"] for a in actions if a["slot"] is not None},
        "nodes": {a["node"] for a in actions if a["node"] is not None},
        "rids": {a["rid"] for a in actions if a["rid"] is not None},
    }
    if any(touched.values()):  # the patched method knew what it touched: the violation names it
        assert any(set(detection[kind]) & touched[kind] for kind in touched), f"{fault}: {detection} names none of {touched}"
