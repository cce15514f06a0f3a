"""Capture on demand on the live engine: with no client subscribed the hooks skip per-step
capture, with only a live view subscribed they capture within their time budget, yet every
snapshot asked for and every live frame catches up with everything since (checked by the
self-check against a full re-read and sglang's own counters), busy or idle."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from mcinspect.client import EngineUnreachable, request
from mcinspect.schema import SCHEMA_VERSION, GetSnapshot, GetStats, Hello, Snapshot, Stats
from mcinspect.session import Session
from mcinspect.target import Target

from engine_runs import ENGINE_MATRIX, MCINSPECT, free_port_pair, opt_in, stop_served_demo, tagged_env
from waiting import until

pytestmark = [pytest.mark.slow, opt_in(ENGINE_MATRIX)]  # CI: on-demand capture under the live clients (test_live_stream)

REQUESTS = 80


def _snapshot(target: Target) -> Snapshot:
    reply = request(target, GetSnapshot(schema_version=SCHEMA_VERSION), timeout_s=30)
    assert isinstance(reply, Snapshot)
    return reply


def test_unwatched_and_live_steps_are_skipped_and_caught_up() -> None:
    port = free_port_pair()
    env, tag = tagged_env()
    command = [MCINSPECT, "demo", "--json", "--serve", "--self-check", "--port", str(port), "--requests", str(REQUESTS)]
    process = subprocess.Popen(
        command, env=env | {"MCINSPECT_CAPTURE": "on-demand"}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    target = Target("127.0.0.1", port)
    summary: list[str] = []
    threading.Thread(target=lambda: summary.append(process.stdout.readline()), daemon=True).start()
    try:
        end = time.monotonic() + 180
        while True:
            try:
                request(target, Hello(schema_version=SCHEMA_VERSION), timeout_s=2)
                break
            except EngineUnreachable:
                assert time.monotonic() < end and process.poll() is None, "engine did not come up"
                time.sleep(0.2)
        steps = []
        while not summary and len(steps) < 3:  # snapshots while the workload runs, nobody subscribed
            steps.append(_snapshot(target).state.step)
            time.sleep(0.5)
        unobserved_before = request(target, GetStats(schema_version=SCHEMA_VERSION)).counters.unobserved_steps
        with Session(target, timeout_s=5, every_step=False) as live:  # a TUI's live stream
            live.connect()
            live.start_reader()
            while not summary:
                steps.append(_snapshot(target).state.step)
                time.sleep(0.5)
            assert json.loads(summary[0])["requests"] == REQUESTS
            final = _snapshot(target)  # the engine is idle now: caught up in Scheduler.on_idle
            stats = request(target, GetStats(schema_version=SCHEMA_VERSION))
            assert isinstance(stats, Stats)
            assert until(lambda: live.counters().last_seq >= final.seq, 20), live.counters()
            frames = [frame.step for frame in live.history()]
            assert live.latest().state == final.state and live.counters().resyncs == 0
        assert final.state.step == stats.step and steps == sorted(steps)
        assert stats.self_check_failures == 0, stats.self_check_first_failure
        assert stats.counters.unobserved_steps > 0 and 3 <= stats.self_check_steps < stats.step
        # The live stream skipped steps (within its time budget) yet followed the workload
        assert 3 <= len(frames) < frames[-1] - frames[0], frames
        assert stats.counters.unobserved_steps > unobserved_before
        with Session(target, timeout_s=5) as late:  # a client after all that sees the same state
            late.connect()
            assert late.latest().state == final.state
    finally:
        stop_served_demo(process, tag)
