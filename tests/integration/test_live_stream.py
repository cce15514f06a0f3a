"""The stream from a live engine: clients that come early, late, stall, die; hostile frames.

The engine and its clients are the `live` fixture (tests/support/live_demo.py), shared with the
other tests of this folder: a `mcinspect demo --serve --self-check` whose hooks verify each
captured step against a full re-read and sglang's own counters, and which stays up after its
workload so the final state can be compared with what the clients replayed.
"""

from __future__ import annotations

import json
import subprocess
import time

import msgspec
import pytest

from mcinspect.client import request
from mcinspect.schema import SCHEMA_VERSION, GetStats, Hello, Snapshot, Stats
from mcinspect.session import Session

from engine_runs import MCINSPECT
from live_demo import REQUESTS, LiveDemo, open_fds, snapshot_of
from waiting import until

pytestmark = pytest.mark.slow


def _settled(session: Session, seq: int, deadline_s: float = 20) -> None:
    until(lambda: session.counters().last_seq >= seq, deadline_s)
    assert session.counters().last_seq == seq


def test_workload_completed_under_all_clients(live: LiveDemo) -> None:
    assert live.summary["requests"] == REQUESTS
    assert live.summary["stats"]["hook_errors"] == 0


def test_every_step_matched_a_full_read_and_sglang(live: LiveDemo) -> None:
    stats = request(live.target, GetStats(schema_version=SCHEMA_VERSION))
    assert isinstance(stats, Stats)
    assert stats.self_check_failures == 0, stats.self_check_first_failure
    # every capture was checked: one per step, and more when the verifier's idle-time results went
    # out (the served trickle keeps stepping: the step read may be ending, not yet published)
    assert stats.self_check_steps == stats.counters.published >= stats.step - 1 > 50


def test_replayed_stream_equals_the_final_snapshot(live: LiveDemo) -> None:
    snapshot = snapshot_of(live.target)
    _settled(live.early, snapshot.seq)
    assert live.early.latest().state == snapshot.state
    assert live.early.counters().resyncs == 0


def test_slot_claims_partition_the_pool(live: LiveDemo) -> None:
    state = snapshot_of(live.target).state
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
        snapshot = snapshot_of(live.target)
        assert late.latest().state == snapshot.state


def test_a_stalled_client_catches_up(live: LiveDemo) -> None:
    """`stalled` read nothing during the whole workload. This engine's stream is small (~200
    bytes a step), so the socket buffers may hold all of it; whatever they could not hold was
    dropped by the PUB socket and is a gap the session fills (ring or snapshot). Either way it
    reaches the engine's exact state. The overflow itself is forced, with small bounds and ~24 MB
    unread, in test_transport's test_a_stalled_subscriber_never_slows_the_publisher."""
    snapshot = snapshot_of(live.target)
    assert live.stalled.counters().last_seq < snapshot.seq - 100  # the workload went by unread
    until(lambda: live.stalled.counters().last_seq >= snapshot.seq, 30, lambda: live.stalled.poll(0.2))
    counters = live.stalled.counters()
    assert counters.last_seq == snapshot.seq and counters.bad_frames == 0, counters
    assert counters.gaps <= counters.history_fills + counters.resyncs, counters  # every gap was closed
    assert live.stalled.latest().state == snapshot.state


FD_SLACK = 16
"""Descriptors the engine may open after the flood for reasons of its own."""


def test_malformed_frames_are_refused_and_nothing_leaks(live: LiveDemo) -> None:
    stats = request(live.target, GetStats(schema_version=SCHEMA_VERSION))
    assert stats.counters.rejected_requests - live.rejected_before == live.malformed_sent
    pid = request(live.target, Hello(schema_version=SCHEMA_VERSION)).pid
    # No socket or file left per bad frame (1,000 of them) or peer: the count may move by the
    # few descriptors the engine itself opens later (sglang, torch threads, clients connected since).
    assert open_fds(pid) <= live.scheduler_fds_during + FD_SLACK


def test_cli_snapshot_and_info(live: LiveDemo, tmp_path) -> None:
    out = tmp_path / "snap.json"
    done = subprocess.run([MCINSPECT, "snapshot", str(live.target.port), "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    snapshot = msgspec.json.decode(out.read_bytes(), type=Snapshot)
    assert snapshot.state == snapshot_of(live.target).state
    done = subprocess.run([MCINSPECT, "info", str(live.target.port), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ranks = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(ranks) == 1 and ranks[0]["info"]["strategy"] == "extra_buffer"
    assert ranks[0]["stats"]["counters"]["published"] >= ranks[0]["stats"]["step"]  # + idle verification results


def test_the_tui_attached_to_the_live_engine_shows_its_state(live: LiveDemo) -> None:
    from mcinspect.tui import InspectorApp, SessionSource, checks_checker

    snapshot = snapshot_of(live.target)
    source = SessionSource(lambda on_frame: Session(live.target, on_frame=on_frame), name="live")

    async def attach() -> InspectorApp:
        app = InspectorApp(source, checks=lambda source: checks_checker(None))
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
