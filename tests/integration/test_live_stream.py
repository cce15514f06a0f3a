"""The stream from a live engine: clients that come early, late, stall, die; hostile frames.

One `mcinspect demo --serve --self-check` process serves every test here: its hooks verify each
captured step against a full re-read and sglang's own counters (self-check), and it stays up
after its workload so the final state can be compared with what the clients replayed.
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

import msgspec
import pytest
import zmq
from engine_runs import MCINSPECT, free_port_pair, tagged_env, tagged_processes

from mcinspect.client import EngineUnreachable, request
from mcinspect.schema import SCHEMA_VERSION, GetSnapshot, GetStats, Hello, Snapshot, Stats, encoder
from mcinspect.session import Session
from mcinspect.target import Target

pytestmark = pytest.mark.slow

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
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(target.address)
    for i in range(count):
        dealer.send(kinds[i % len(kinds)](i))
    time.sleep(1.0)
    dealer.close()
    return count


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture(scope="module")
def live() -> Iterator[LiveDemo]:
    port = free_port_pair()
    env, tag = tagged_env()
    command = [MCINSPECT, "demo", "--json", "--serve", "--self-check", "--port", str(port), "--requests", str(REQUESTS)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr_lines: list[str] = []
    threading.Thread(target=lambda: stderr_lines.extend(process.stderr), daemon=True).start()
    target = Target("127.0.0.1", port)
    sessions: list[Session] = []
    try:
        early = _connect_when_up(target, deadline_s=180)
        sessions.append(early)
        early.start_reader()
        # reads nothing until the workload is over: its queue overflows, it must catch up
        stalled = _connect_when_up(target, deadline_s=10, rcv_hwm=20)
        sessions.append(stalled)
        # a client killed mid-stream
        victim = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""
                from mcinspect.session import Session
                from mcinspect.target import Target
                s = Session(Target("127.0.0.1", {port})); s.connect()
                while True: s.poll(0.05)
            """)]
        )
        pid = request(target, Hello(schema_version=SCHEMA_VERSION)).pid
        rejected_before = request(target, GetStats(schema_version=SCHEMA_VERSION)).counters.rejected_requests
        sent = _flood(target, MALFORMED)
        fds_during = _open_fds(pid)
        time.sleep(0.5)
        victim.kill()
        victim.wait()
        line = process.stdout.readline()  # the summary, printed once the workload is done
        assert line, "demo exited early:\n" + "".join(stderr_lines[-40:])
        yield LiveDemo(process, target, tag, early, stalled, json.loads(line), rejected_before, sent, fds_during)
    finally:
        for session in sessions:
            session.close()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        assert tagged_processes(tag) == [], "engine processes left behind"


def _snapshot(target: Target) -> Snapshot:
    reply = request(target, GetSnapshot(schema_version=SCHEMA_VERSION), timeout_s=30)
    assert isinstance(reply, Snapshot)
    return reply


def _settled(session: Session, seq: int, deadline_s: float = 20) -> None:
    end = time.monotonic() + deadline_s
    while session.counters().last_seq < seq and time.monotonic() < end:
        time.sleep(0.1)
    assert session.counters().last_seq == seq


def test_workload_completed_under_all_clients(live: LiveDemo) -> None:
    assert live.summary["requests"] == REQUESTS
    assert live.summary["stats"]["hook_errors"] == 0


def test_every_step_matched_a_full_read_and_sglang(live: LiveDemo) -> None:
    stats = request(live.target, GetStats(schema_version=SCHEMA_VERSION))
    assert isinstance(stats, Stats)
    assert stats.self_check_failures == 0, stats.self_check_first_failure
    assert stats.self_check_steps == stats.step > 50


def test_replayed_stream_equals_the_final_snapshot(live: LiveDemo) -> None:
    snapshot = _snapshot(live.target)
    _settled(live.early, snapshot.seq)
    assert live.early.latest().state == snapshot.state
    assert live.early.counters().resyncs == 0


def test_slot_claims_partition_the_pool(live: LiveDemo) -> None:
    state = _snapshot(live.target).state
    size = live.summary["stats"]["mamba_pool_size"]
    assert sorted(state.slots) == list(range(1, size + 1))
    for slot, claims in state.slots.items():
        assert len(claims) == 1 and claims[0].slot == slot, claims
    kinds = {claims[0].kind for claims in state.slots.values()}
    assert kinds <= {"free", "tree"}  # idle engine: no request holds a slot any more
    tree_slots = {claims[0].slot for claims in state.slots.values() if claims[0].kind == "tree"}
    assert tree_slots == {node.mamba_slot for node in state.nodes.values() if node.mamba_slot >= 0}


def test_a_late_client_sees_the_same_state(live: LiveDemo) -> None:
    with Session(live.target) as late:
        late.connect()
        snapshot = _snapshot(live.target)
        assert late.latest().state == snapshot.state


def test_a_stalled_client_catches_up(live: LiveDemo) -> None:
    snapshot = _snapshot(live.target)
    deadline = time.monotonic() + 30
    while live.stalled.counters().last_seq < snapshot.seq and time.monotonic() < deadline:
        live.stalled.poll(0.2)
    counters = live.stalled.counters()
    assert counters.gaps > 0  # it really fell behind
    assert live.stalled.latest().state == snapshot.state


def test_malformed_frames_are_refused_and_nothing_leaks(live: LiveDemo) -> None:
    stats = request(live.target, GetStats(schema_version=SCHEMA_VERSION))
    assert stats.counters.rejected_requests - live.rejected_before == live.malformed_sent
    pid = request(live.target, Hello(schema_version=SCHEMA_VERSION)).pid
    assert _open_fds(pid) <= live.scheduler_fds_during  # no socket or file left per bad peer


def test_cli_snapshot_and_info(live: LiveDemo, tmp_path) -> None:
    out = tmp_path / "snap.json"
    done = subprocess.run([MCINSPECT, "snapshot", str(live.target.port), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    snapshot = msgspec.json.decode(out.read_bytes(), type=Snapshot)
    assert snapshot.state == _snapshot(live.target).state
    done = subprocess.run([MCINSPECT, "info", str(live.target.port), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ranks = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(ranks) == 1 and ranks[0]["info"]["strategy"] == "extra_buffer"
    assert ranks[0]["stats"]["counters"]["published"] == ranks[0]["stats"]["step"]


def test_the_tui_attached_to_the_live_engine_shows_its_state(live: LiveDemo) -> None:
    from mcinspect.tui import InspectorApp, SessionSource, checks_checker

    snapshot = _snapshot(live.target)
    source = SessionSource(lambda on_frame: Session(live.target, on_frame=on_frame), name="live")

    async def attach() -> InspectorApp:
        app = InspectorApp(source, checker=checks_checker(None))
        async with app.run_test(size=(160, 45)) as pilot:
            deadline = time.monotonic() + 60
            while (app.view is None or app.view.state.step < snapshot.state.step) and time.monotonic() < deadline:
                await pilot.pause(0.2)
            await pilot.press("2")  # the page map tab renders from the same state
            await pilot.pause()
            assert app.view is not None and app.view.state == snapshot.state
        return app

    import asyncio

    asyncio.run(attach())
