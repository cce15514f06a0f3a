"""Helpers shared by the tests that run the real engine (each through `mcinspect demo`)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

MCINSPECT = str(Path(sys.executable).parent / "mcinspect")
ENGINE_MATRIX = "MCINSPECT_ENGINE_MATRIX"
FAULT_MATRIX = "MCINSPECT_FAULT_MATRIX"


def opt_in(variable: str) -> pytest.MarkDecorator:
    """Skip unless `variable`=1: an engine run CI leaves out for its 25-minute budget (README,
    "Tests"); what it covers runs in CI in a cheaper form, named where the mark is used."""
    return pytest.mark.skipif(os.environ.get(variable) != "1", reason=f"CI's time budget: {variable}=1 runs it")


def free_port_pair() -> int:
    """A port p with p and p + 1 free (the hooks of rank 0 bind both), from 10000-21999.

    The ports are bound only later, by the engine's scheduler process, so they must come from
    outside both the kernel's ephemeral range (32768+, which any outgoing connection, e.g.
    torch.distributed's, may take meanwhile) and sglang's own pick for its ports (22000-29999).
    """
    for port in random.sample(range(10000, 21999), 200):
        try:
            with socket.socket() as s, socket.socket() as s2:
                s.bind(("127.0.0.1", port))
                s2.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair found in 10000-21999")


def free_ports_for_ranks(ranks: int) -> int:
    """A base port whose 2 * `ranks` ports are free (each rank binds two)."""
    for _ in range(50):
        port = free_port_pair()
        if all(_port_free(port + offset) for offset in range(2, 2 * ranks)):
            return port
    raise RuntimeError("no run of free ports found")


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


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
