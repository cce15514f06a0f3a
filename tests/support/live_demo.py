"""One live `mcinspect demo --serve --self-check` engine for every test that reads it
(tests/integration/conftest.py's `live` fixture): each engine start costs ~20 s of 2 cores.

While its workload runs it has every kind of client: a session that reads along (`early`), one
that reads nothing until the workload is over (`stalled`), one killed mid-stream, a flood of
malformed frames, and `mcinspect record` writing the stream to `recording`. Its hooks verify
each captured step against a full re-read and sglang's counters (self-check), and it stays up
after the workload, idle, so that what the clients replayed can be compared with its state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zmq

from mcinspect.client import EngineUnreachable, client_socket, request
from mcinspect.schema import SCHEMA_VERSION, GetSnapshot, GetStats, Hello, Snapshot, encoder
from mcinspect.session import Session
from mcinspect.target import Target

from engine_runs import MCINSPECT, free_port_pair, stop_served_demo, tagged_env

REQUESTS = 160
MALFORMED = 1000


@dataclass
class LiveDemo:
    process: subprocess.Popen[str]
    target: Target
    tag: str
    early: Session
    stalled: Session
    summary: dict
    rejected_before: int
    malformed_sent: int
    scheduler_fds_during: int
    recorder: subprocess.Popen[str]
    """`mcinspect record PORT -o recording`, started with the workload; SIGINT stops it."""
    recording: Path


def _connect_when_up(target: Target, deadline_s: float, **session_args: object) -> Session:
    end = time.monotonic() + deadline_s
    while True:
        session = Session(target, timeout_s=2.0, **session_args)
        try:
            session.connect()
            return session
        except EngineUnreachable:
            session.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def _flood(target: Target, count: int) -> int:
    """Malformed frames of every kind to the request socket; returns how many were sent."""
    kinds = [
        lambda i: os.urandom(1 + i % 64),
        lambda i: encoder.encode(Hello(schema_version=SCHEMA_VERSION + 1 + i)),
        lambda i: b"\x91" + b"\xff" * (70_000 + i),  # oversized
        lambda i: encoder.encode({"type": "Hello", "schema_version": "two"}),
        lambda i: encoder.encode({"type": "Reboot", "schema_version": SCHEMA_VERSION}),
    ]
    # A client of the engine's own user (it holds the key): CURVE keeps everyone else out.
    dealer = client_socket(zmq.Context.instance(), zmq.DEALER, target.host, target.port, "")
    dealer.connect(target.address)
    for i in range(count):
        dealer.send(kinds[i % len(kinds)](i))
    # Every one is answered (a refusal with its reason), at the pace the request thread's time
    # share allows: the count is only final once the last answer is back.
    answered, deadline = 0, time.monotonic() + 60
    while answered < count and dealer.poll(max(1, int(1000 * (deadline - time.monotonic())))):
        dealer.recv()
        answered += 1
    dealer.close()
    return count


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def snapshot_of(target: Target) -> Snapshot:
    reply = request(target, GetSnapshot(schema_version=SCHEMA_VERSION), timeout_s=30)
    assert isinstance(reply, Snapshot)
    return reply


def run_live_demo(workdir: Path) -> Iterator[LiveDemo]:
    """Start the demo and its clients, yield once its workload is done, then stop everything
    and check that no process is left."""
    port = free_port_pair()
    env, tag = tagged_env()
    command = [MCINSPECT, "demo", "--json", "--serve", "--self-check", "--port", str(port), "--requests", str(REQUESTS)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr_lines: list[str] = []
    threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True).start()
    target = Target("127.0.0.1", port)
    sessions: list[Session] = []
    recorder: subprocess.Popen[str] | None = None
    try:
        early = _connect_when_up(target, deadline_s=180)
        sessions.append(early)
        early.start_reader()
        recording = workdir / "live.mcrec"
        recorder = subprocess.Popen(
            [MCINSPECT, "record", str(port), "-o", str(recording)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        # reads nothing until the workload is over, then must catch up (its ZMQ queue holds 20)
        stalled = _connect_when_up(target, deadline_s=10, rcv_hwm=20)
        sessions.append(stalled)
        # a client killed mid-stream
        victim = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
                from mcinspect.session import Session
                from mcinspect.target import Target
                s = Session(Target("127.0.0.1", {port})); s.connect()
                while True: s.poll(0.05)
            """),
            ]
        )
        pid = request(target, Hello(schema_version=SCHEMA_VERSION)).pid
        rejected_before = request(target, GetStats(schema_version=SCHEMA_VERSION)).counters.rejected_requests
        sent = _flood(target, MALFORMED)
        fds_during = open_fds(pid)
        time.sleep(0.5)
        victim.kill()
        victim.wait()
        line = process.stdout.readline()  # the summary, printed once the workload is done
        assert line, "demo exited early:\n" + "".join(stderr_lines[-40:])
        yield LiveDemo(process, target, tag, early, stalled, json.loads(line), rejected_before, sent, fds_during, recorder, recording)
    finally:
        if recorder is not None and recorder.poll() is None:
            recorder.send_signal(signal.SIGINT)
            try:
                recorder.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # still stop the engine below; the test has failed already
                recorder.kill()
        for session in sessions:
            session.close()
        stop_served_demo(process, tag)
