"""sglang's own HTTP server as a deployment: the README's "own engine" lines run as written
(the server, curl, a snapshot checked), a recording taken while a workload arrives over HTTP is
checked clean, and `mcinspect demo --http-port` gives the in-process engine's outputs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from mcinspect_engine_hooks.cpu_engine.workload import Workload

from engine_runs import ENGINE_MATRIX, MCINSPECT, free_port_pair, opt_in, tagged_env, tagged_processes

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- http-server-commands -->"
SERVER_URL = "http://127.0.0.1:30000"
INSPECTOR_PORT = 7777
"""The ports the README's lines use."""
REQUESTS = 16


def readme_lines() -> list[str]:
    """The indented command lines after the marker, up to the first blank line."""
    text = README.read_text().split(MARKER, 1)[1].lstrip("\n")
    block = text.split("\n\n", 1)[0]
    return [line.removeprefix("    ") for line in block.splitlines()]


def shell(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def wait_healthy(server: subprocess.Popen[str], timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert server.poll() is None, "sglang's HTTP server exited during start-up (its log is in the test's output)"
        try:
            if requests.get(f"{SERVER_URL}/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise AssertionError(f"{SERVER_URL}/health did not answer 200 within {timeout_s} s")


def send_workload(url: str) -> int:
    """The demo's cache workload as HTTP batches; returns the cached prompt tokens."""
    workload, cached = Workload(seed=0, total_requests=REQUESTS), 0
    for wave in workload.waves():
        body = {
            "input_ids": [spec.input_ids for spec in wave],
            "sampling_params": [{"max_new_tokens": spec.max_new_tokens, "temperature": 0.0, "ignore_eos": True} for spec in wave],
        }
        outputs = requests.post(f"{url}/generate", json=body, timeout=300).json()
        workload.record(wave, [out["output_ids"] for out in outputs])
        cached += sum(int(out["meta_info"]["cached_tokens"]) for out in outputs)
    return cached


@pytest.fixture
def readme_server(tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """The README's first line (the server), run as written in the venv's PATH."""
    for port in (INSPECTOR_PORT, INSPECTOR_PORT + 1, 30000):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} (the README's) is taken"
    env, tag = tagged_env()
    env = env | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}
    server = subprocess.Popen(["bash", "-c", readme_lines()[0]], cwd=tmp_path, env=env, text=True, start_new_session=True)
    try:
        wait_healthy(server)
        yield env, tag
    finally:
        server.terminate()  # sglang's server stops its scheduler and detokenizer itself
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    assert tagged_processes(tag) == [], "server processes left behind"


def test_the_readmes_own_engine_lines_run_as_written(readme_server: tuple[dict[str, str], str], tmp_path: Path) -> None:
    env, _ = readme_server
    server_line, curl_line, snapshot_line = readme_lines()
    assert "sglang.launch_server" in server_line and "curl" in curl_line and "snapshot" in snapshot_line

    served = shell(curl_line, tmp_path, env)
    assert served.returncode == 0 and len(json.loads(served.stdout)["output_ids"]) == 8, served.stdout

    recording = tmp_path / "http.mcrec"
    recorder = subprocess.Popen(
        [MCINSPECT, "record", str(INSPECTOR_PORT), "-o", str(recording)], env=env, text=True, stderr=subprocess.PIPE
    )
    try:
        time.sleep(3)  # subscribed before the workload starts
        cached = send_workload(SERVER_URL)
        assert cached > 0  # requests over HTTP hit the prefix cache

        checked = shell(snapshot_line, tmp_path, env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "no violations" in checked.stderr
        snap = json.loads((tmp_path / "snap.json").read_text())
        assert len(snap["state"]["nodes"]) > 1  # the workload's prefixes are in the tree
        time.sleep(1)
    finally:
        recorder.send_signal(signal.SIGINT)
        stopped = recorder.wait(timeout=60)
    assert stopped == 130, recorder.stderr.read() if recorder.stderr else ""  # stopped by Ctrl-C, recording whole
    check = subprocess.run([MCINSPECT, "check", str(recording)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


@opt_in(ENGINE_MATRIX)  # CI: the README's own-engine lines run sglang's HTTP server (above)
def test_demo_through_the_http_server_gives_the_in_process_engines_outputs(tmp_path: Path) -> None:
    def demo(*args: str) -> dict:
        run = subprocess.run(
            [MCINSPECT, "demo", "--json", "--requests", str(REQUESTS), "--port", str(free_port_pair()), *args],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        return json.loads(run.stdout)

    http_port = free_port_pair()
    over_http = demo("--http-port", str(http_port), "--record", str(tmp_path / "demo.mcrec"))
    in_process = demo()
    assert over_http["http_url"] == f"http://127.0.0.1:{http_port}" and in_process["http_url"] == ""
    assert over_http["output_digest"] == in_process["output_digest"]  # the CPU engine is bit-exact
    assert over_http["cached_tokens"] == in_process["cached_tokens"] > 0
    assert over_http["stats"]["counters"]["hook_errors"] == 0
    check = subprocess.run([MCINSPECT, "check", str(tmp_path / "demo.mcrec")], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
