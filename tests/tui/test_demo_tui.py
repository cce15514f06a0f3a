"""`mcinspect demo` without --headless opens the TUI on the live embedded engine (one engine
start, in a fresh interpreter: see demo_probe.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine_runs import free_port_pair, free_ports_for_ranks, opt_in, tagged_env, tagged_processes

pytestmark = pytest.mark.slow

PROBE = Path(__file__).with_name("demo_probe.py")


def test_demo_opens_the_tui_on_the_live_engine() -> None:
    env, tag = tagged_env()
    done = subprocess.run([sys.executable, str(PROBE), str(free_port_pair())], env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert "tiny-qwen3-next" in seen["header"] and "extra_buffer" in seen["header"] and "sglang 0.5.23" in seen["header"]
    assert "connected" in seen["header"] and "LIVE" in seen["header"]
    assert seen["status"] == "connected" and seen["following"]
    assert seen["step"] > 0 and seen["frames"] > 1 and seen["requests_seen"] > 0
    assert seen["tab"] == "requests"
    assert seen["running_after_q"] is False
    assert "leaked" not in done.stderr  # nanobind's report of objects the GC never freed
    assert tagged_processes(tag) == [], "engine processes left behind"


@opt_in("MCINSPECT_TP_TESTS")
def test_demo_with_two_ranks_opens_the_tui_on_both() -> None:
    """`mcinspect demo --tp 2`'s TUI finds both ranks, R shows rank 1 at the paused step, and the
    ranks tab finds them agreeing there."""
    env, tag = tagged_env()
    done = subprocess.run(
        [sys.executable, str(PROBE), str(free_ports_for_ranks(2)), "2"], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = json.loads(done.stdout.splitlines()[-1])["ranks"]
    assert ranks["count"] == 2 and ranks["after_R"]["rank"] == 1 and ranks["after_R"]["step"] == ranks["paused_at"]
    assert "rank 1 of 2" in ranks["after_R"]["header"] and ranks["verdicts"] == ["reference", "agrees"]
    assert tagged_processes(tag) == [], "engine processes left behind"
