"""Stopping long-running commands (issue 13, point 7): Ctrl-C or SIGTERM to the command's whole
process group (what a terminal and `timeout` do) prints one line, "stopped", exits 130 / 143,
leaves no engine process behind, and a recording ends whole."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mcinspect.client import EngineUnreachable, request
from mcinspect.recording import RecordingReader
from mcinspect.schema import SCHEMA_VERSION, Hello
from mcinspect.target import Target

from engine_runs import ENGINE_MATRIX, MCINSPECT, free_port_pair, opt_in, tagged_env, tagged_processes

pytestmark = [pytest.mark.slow, opt_in(ENGINE_MATRIX)]  # CI: every demo run ends with no process left (test_embedded_engine)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([MCINSPECT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def _wait_for_engine(port: int, process: subprocess.Popen[str], timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1][-3000:]
        try:
            request(Target("127.0.0.1", port), Hello(schema_version=SCHEMA_VERSION), timeout_s=1)
            return
        except EngineUnreachable:
            time.sleep(0.5)
    raise AssertionError("the engine did not come up")


def _stop_group(process: subprocess.Popen[str], signum: int) -> tuple[int, str]:
    os.killpg(process.pid, signum)  # the command and the engine's processes, as `timeout` does
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_a_recording_ends_whole_and_the_busy_demo_stops_with_one_line(tmp_path: Path) -> None:
    """One engine for both (CI's time budget): the recorder takes Ctrl-C (130), then the demo,
    in the middle of its workload, SIGTERM to its whole process group (143)."""
    port = free_port_pair()
    env, tag = tagged_env()
    demo = _start(["demo", "--headless", "--requests", "400", "--port", str(port)], env)
    try:
        _wait_for_engine(port, demo)
        output = tmp_path / "run.mcrec"
        recorder = _start(["record", str(port), "-o", str(output)], env)
        deadline = time.monotonic() + 60
        while not output.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        returncode, err = _stop_group(recorder, signal.SIGINT)  # Ctrl-C in its terminal
        assert returncode == 130 and err.strip().splitlines()[-1] == "stopped", err
        reader = RecordingReader(output)
        frames = list(reader)
        assert frames and not reader.truncated  # the end mark is there
    finally:
        returncode, err = _stop_group(demo, signal.SIGTERM)
    # Was: sglang's "Subprocess scheduler_0 crashed with exit code -15 ... SIGQUIT" and 137.
    assert returncode == 143, err[-3000:]
    assert err.strip().splitlines()[-1] == "stopped"
    assert "Traceback" not in err and "crashed" not in err and "SIGQUIT" not in err, err[-3000:]
    assert tagged_processes(tag) == []
