"""The embedded engine behind sglang's own HTTP server (`python -m sglang.launch_server`), the
deployment users run: `mcinspect demo --http-port N` starts it and drives the workload over
HTTP, so the demo's requests, and anyone's curl or OpenAI-client requests, take the server's
path through the tokenizer manager to the same hooked scheduler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

from .launcher import EmbeddedEngineConfig, EngineStartError, engine_kwargs, ensure_port_free, prepare_engine_environment

HOST = "127.0.0.1"
"""sglang's HTTP server binds loopback here, as the inspector's ports do."""
START_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 600.0
_NOT_CLI = ("custom_sigquit_handler",)
"""Engine keyword arguments with no command-line form (the server has its own signal handling)."""


def server_command(config: EmbeddedEngineConfig, model_path: Path, http_port: int) -> list[str]:
    """`python -m sglang.launch_server` with the embedded engine's settings as flags."""
    argv = [sys.executable, "-m", "sglang.launch_server", "--host", HOST, "--port", str(http_port)]
    for key, value in engine_kwargs(config, str(model_path)).items():
        if key in _NOT_CLI or value is False or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


class HttpEngine:
    """sglang's HTTP server in a child process, with the two calls the demo makes of an engine."""

    def __init__(self, process: subprocess.Popen[bytes], http_port: int) -> None:
        self.process = process
        self.url = f"http://{HOST}:{http_port}"
        self._session = requests.Session()

    def generate(self, input_ids: list[list[int]], sampling_params: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A batch through `/generate` (token ids in and out: the tiny model has no tokenizer)."""
        reply = self._session.post(
            f"{self.url}/generate", json={"input_ids": input_ids, "sampling_params": sampling_params}, timeout=REQUEST_TIMEOUT_S
        )
        reply.raise_for_status()
        outputs = reply.json()
        return outputs if isinstance(outputs, list) else [outputs]

    def shutdown(self) -> None:
        """Stop the server (it stops its scheduler and detokenizer); its whole process group if
        it does not within STOP_TIMEOUT_S."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._session.close()


def start_http_engine(config: EmbeddedEngineConfig, http_port: int, timeout_s: float = START_TIMEOUT_S) -> HttpEngine:
    """Start sglang's HTTP server on the embedded engine and wait until it serves (its own
    warm-up request done); raise EngineStartError if it exits or does not come up."""
    ensure_port_free(http_port)
    model_path = prepare_engine_environment(config)
    # Its own session: Ctrl-C reaches the demo, which stops the server's group in shutdown().
    process = subprocess.Popen(server_command(config, model_path, http_port), start_new_session=True)
    engine = HttpEngine(process, http_port)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineStartError(f"sglang's HTTP server exited during start-up (exit code {process.returncode}); its log is above")
        if _healthy(engine.url):
            return engine
        time.sleep(0.5)
    engine.shutdown()
    raise EngineStartError(f"sglang's HTTP server did not answer {engine.url}/health within {timeout_s:.0f} s; its log is above")


def _healthy(url: str) -> bool:
    """sglang answers /health with 503 until its warm-up request has run, then 200."""
    try:
        return requests.get(f"{url}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False
