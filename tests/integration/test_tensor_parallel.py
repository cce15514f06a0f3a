"""Two tensor-parallel ranks on the embedded engine (`mcinspect demo --tp 2`): each rank's hooks
on their own ports, `mcinspect info` lists both, the demo's recording holds both ranks and
`mcinspect check` reads it clean, ranks compared (check tp-agree). The fault that desynchronises
one rank (tp-desync) is in test_faults_caught, in CI: its run shows the ranks agreeing before
the fault acts, both ranks listed and recorded, and tp-agree catching the drift."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from mcinspect.recording import RecordingReader
from mcinspect.schema import Delta, Snapshot

from engine_runs import MCINSPECT, free_ports_for_ranks, tagged_env, tagged_processes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("MCINSPECT_TP_TESTS") != "1", reason="CI's time budget: MCINSPECT_TP_TESTS=1 runs it"),
]


def test_two_ranks_are_listed_recorded_and_agree(tmp_path: Path) -> None:
    port, recording = free_ports_for_ranks(2), tmp_path / "tp.mcrec"
    env, tag = tagged_env()
    demo = subprocess.Popen(
        [MCINSPECT, "demo", "--tp", "2", "--json", "--serve", "--requests", "24", "--port", str(port), "--record", str(recording)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        summary = json.loads(demo.stdout.readline())  # --serve prints the summary, then serves
        assert summary["tp_size"] == 2 and summary["stats"]["hook_errors"] == 0
        info = subprocess.run([MCINSPECT, "info", str(port), "--json"], capture_output=True, text=True, timeout=60)
        assert info.returncode == 0, info.stderr
        ranks = [json.loads(line)["info"] for line in info.stdout.splitlines()]
        assert [(r["tp_rank"], r["request_port"]) for r in ranks] == [(0, port), (1, port + 2)]
        assert ranks[0]["mamba_pool_size"] == ranks[1]["mamba_pool_size"] > 0
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=120)
    assert tagged_processes(tag) == []
    rank1 = tmp_path / "tp.rank1.mcrec"
    assert recording.exists() and rank1.exists()
    check = subprocess.run([MCINSPECT, "check", str(recording), "--json", "--ungrouped"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    steps = [{frame_step(f) for f in RecordingReader(path)} for path in (recording, rank1)]
    assert len(steps[0] & steps[1]) > 20  # tp-agree compared the ranks at every common step


def frame_step(frame: Snapshot | Delta) -> int:
    return frame.state.step if isinstance(frame, Snapshot) else frame.step
