"""Helpers shared by the tests that run the real engine (each through `mcinspect demo`)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

MCINSPECT = str(Path(sys.executable).parent / "mcinspect")


def free_port_pair() -> int:
    """A port p with p and p + 1 free (the hooks of rank 0 bind both)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair found")


def tagged_env() -> tuple[dict[str, str], str]:
    """The environment for a demo process, tagged so its descendants can be found later."""
    tag = uuid.uuid4().hex
    return os.environ | {"MCINSPECT_TEST_TAG": tag}, tag


def tagged_processes(tag: str, wait_s: float = 15.0) -> list[str]:
    """Processes still carrying `tag` once those that are exiting had `wait_s` to go."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for proc in psutil.process_iter(["pid", "name"]):
            try:
                if proc.environ().get("MCINSPECT_TEST_TAG") == tag:
                    found.append(f"{proc.pid} {proc.info['name']}")
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def stop_served_demo(process: subprocess.Popen[str], tag: str) -> None:
    """Ctrl-C a `mcinspect demo --serve` (killed after 60 s) and check none of its processes stay."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
    assert tagged_processes(tag) == [], "engine processes left behind"
