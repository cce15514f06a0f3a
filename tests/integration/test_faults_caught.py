"""The fault library against the checks, on the real engine: each fault reproduced by
patching sglang is reported by the check meant to catch it within 3 steps of its first faulty
action, naming what the fault touched; a clean run with the same workload reports nothing
(`mcinspect demo --record` then `mcinspect check`).

The faults log each faulty action (MCINSPECT_FAULT_LOG): the step of the first capture that
can show it, and the slot / node / request it touched where the patched method knows them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fault_runs import CASES, IN_CI, RECOMPUTE_CHECKS, VERIFY_ENV, assert_fault_caught, record_and_check

from mcinspect_engine_hooks.cpu_engine.faults import FAULTS, RECOMPUTE_CHECK
from mcinspect_engine_hooks.families import FAMILIES

from engine_runs import opt_in

pytestmark = pytest.mark.slow

CLEAN_REQUESTS = 48
"""A clean run must reach mamba eviction; with 24 requests nemotron-h's pool never fills."""
MATRIX_ENV = "MCINSPECT_FAULT_MATRIX"
"""Set to 1 for every fault under every model family and configuration it applies to (~80
engine runs), and a clean run of each family x configuration."""
CONFIGS = [("no_buffer", 1), ("extra_buffer", 1), ("extra_buffer", 16), ("extra_buffer_lazy", 16)]
TREE_CORES = ("python", "rust")
"""The matrix runs the faults a recompute catches under both tree cores: the engine oracle reads
the prefix tokens recorded at insert, so it needs no node sglang's Rust core hides."""

CLEAN_CASES = [("nemotron-h", "extra_buffer", 16)]
"""The Mamba2 family's clean run with both oracles, with the matrix (CI's time budget: in CI the
default family's extra_buffer run is read clean with the engine oracle in test_embedded_engine,
and the transformers oracle on the default family in test_oracle)."""


def runs() -> list[tuple[str, str, str, int, str]]:
    if os.environ.get(MATRIX_ENV) == "1":
        return [
            (name, model, *config, core)
            for name, fault in FAULTS.items()
            for model in FAMILIES
            for config in CONFIGS
            if fault.applies_to(*config, model)
            for core in (TREE_CORES if set(fault.expected_checks) & set(RECOMPUTE_CHECKS) else ("python",))
        ]
    return [(*case, "python") for case in CASES if case[0] in IN_CI]


def clean_runs() -> list[Any]:
    if os.environ.get(MATRIX_ENV) == "1":
        return [(model, *config) for model in FAMILIES for config in CONFIGS]
    return [pytest.param(*case, marks=opt_in(MATRIX_ENV)) for case in CLEAN_CASES]


def test_every_fault_has_a_case() -> None:
    assert {name for name, *_ in CASES} == FAULTS.keys()
    for name, model, strategy, page_size in CASES:
        assert FAULTS[name].applies_to(strategy, page_size, model), name


@pytest.mark.parametrize("fault, model, strategy, page_size, tree_core", runs())
def test_fault_is_caught_within_three_steps_naming_what_it_touched(
    fault: str, model: str, strategy: str, page_size: int, tree_core: str, tmp_path: Path
) -> None:
    assert_fault_caught(tmp_path, fault, model, strategy, page_size, tree_core)


@opt_in(MATRIX_ENV)
def test_a_lost_copy_on_write_is_caught_in_the_working_state_while_every_cached_state_is_right(tmp_path: Path) -> None:
    """dropped-cow corrupts only requests that cache nothing afterwards: T2 on cached states
    finds nothing, the working-state check finds them."""
    violations, summary = record_and_check(tmp_path, "--fault", "dropped-cow", "--verify", "engine", env={**os.environ, **VERIFY_ENV})
    checks = {v["check"] for v in violations}
    assert "T2-working-state" in checks and RECOMPUTE_CHECK not in checks, checks
    assert summary["stats"]["verify"]["verified"] > 0  # the cached states were verified, and clean


@pytest.mark.parametrize("model, strategy, page_size", clean_runs())
def test_clean_run_has_no_violations(model: str, strategy: str, page_size: int, tmp_path: Path) -> None:
    args = ["--verify", "both", "--model", model, "--strategy", strategy, "--page-size", str(page_size)]
    violations, summary = record_and_check(tmp_path, *args, env={**os.environ, **VERIFY_ENV}, requests=CLEAN_REQUESTS)
    assert summary["stats"]["evicted_mamba_slots"] > 0  # the run did exercise eviction
    assert summary["engine"]["model_family"] == model
    assert violations == []
