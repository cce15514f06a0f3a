"""`mcinspect check` (issue 13, points 1 and 5): a crashing check exits 2 naming it; violations
are grouped by cause in the table and in --json, one per occurrence with --ungrouped."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcinspect.checks import CHECKS, StepView, Violation
from mcinspect.cli import app

runner = CliRunner()
FAULT = Path(__file__).parents[1] / "tui" / "recordings" / "fault.mcrec"
"""A double-owner run of the embedded engine (`demo --fault double-owner --record`)."""


def test_a_crashing_check_exits_2_and_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(view: StepView) -> list[Violation]:
        raise KeyError("a bug in the check")

    monkeypatch.setitem(CHECKS, "kv-pages", dataclasses.replace(CHECKS["kv-pages"], run=crash))
    result = runner.invoke(app, ["check", str(FAULT)])
    assert result.exit_code == 2, result.output  # was: a traceback and 1, "violations found"
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: check kv-pages crashed at step") and "a bug in the check" in last


def test_the_double_owner_run_is_grouped_by_cause() -> None:
    ungrouped = runner.invoke(app, ["check", str(FAULT), "--json", "--ungrouped"])
    grouped = runner.invoke(app, ["check", str(FAULT), "--json"])
    table = runner.invoke(app, ["check", str(FAULT)])
    assert ungrouped.exit_code == grouped.exit_code == table.exit_code == 1  # the exit code is unchanged
    occurrences = [json.loads(line) for line in ungrouped.stdout.splitlines()]
    groups = [json.loads(line) for line in grouped.stdout.splitlines()]
    assert len(occurrences) == 72 and len(groups) == 20
    assert sum(g["repeats"] for g in groups) == len(occurrences)
    first = groups[0]
    assert set(first) == {"check", "first_step", "last_step", "repeats", "reason", "nodes", "slots", "rids"}
    same = [o for o in occurrences if (o["check"], o["slots"], o["nodes"]) == (first["check"], first["slots"], first["nodes"])]
    assert first["repeats"] == len(same) > 1
    assert (first["first_step"], first["last_step"]) == (same[0]["step"], same[-1]["step"])
    assert first["reason"] == same[0]["reason"]
    # The table in a pipe: a title with both counts, a line a group, reasons whole.
    lines = table.stdout.splitlines()
    assert lines[0].startswith("72 violations in 20 groups") and len(lines) == 2 + 20
    assert all(g["reason"] in table.stdout for g in groups)


def test_ungrouped_needs_json() -> None:
    result = runner.invoke(app, ["check", str(FAULT), "--ungrouped"])
    assert result.exit_code == 2 and "--ungrouped applies to --json" in result.output
