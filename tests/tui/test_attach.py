"""Attach over real sockets: the engine side's own transport (RequestServer + Publisher) serves
the demo states; the app connects through SessionSource and a real Session, follows the
deltas, and keeps its history when the engine goes away.
"""

from __future__ import annotations

import time

import msgspec
from data import demo_checker, demo_events, demo_info, demo_states
from helpers import run_async

from mcinspect.schema import SCHEMA_VERSION, CacheState, Counters, Delta, Event, Seq, Snapshot, Stats
from mcinspect.session import Session
from mcinspect.target import Target
from mcinspect.tui import InspectorApp, SessionSource
from mcinspect_engine_hooks.publisher import Publisher
from mcinspect_engine_hooks.server import RequestServer


def delta(seq: int, old: CacheState, new: CacheState, events: list[Event]) -> Delta:
    """What changed from `old` to `new`, as the hooks would publish it."""
    return Delta(
        schema_version=SCHEMA_VERSION, seq=Seq(seq), step=new.step,
        upsert_nodes=[n for k, n in new.nodes.items() if old.nodes.get(k) != n],
        removed_nodes=[k for k in old.nodes if k not in new.nodes],
        slots={k: v for k, v in new.slots.items() if old.slots.get(k) != v},
        upsert_requests=[r for k, r in new.requests.items() if old.requests.get(k) != r],
        removed_requests=[k for k in old.requests if k not in new.requests],
        kv=new.kv if new.kv != old.kv else None, events=events, counters=Counters(),
    )  # fmt: skip


class DemoEngine:
    """The demo states served through the engine side's real transport (engine_hooks'
    RequestServer and Publisher): a snapshot of the first state, then one delta per step."""

    def __init__(self) -> None:
        self.states, self.events = demo_states(), demo_events()
        self.publisher = Publisher("127.0.0.1", 0)
        info = msgspec.structs.replace(demo_info(), request_port=0, stream_port=self.publisher.port)
        self.server = RequestServer(
            "127.0.0.1", 0, token="", info=info, snapshot=self._snapshot, history=self.publisher.history_after, stats=self._stats
        )
        self.port = self.server.port
        self.publisher.start()
        self.server.start()

    def _snapshot(self) -> Snapshot:
        return Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(1), state=self.states[0], counters=Counters())

    def _stats(self) -> Stats:
        return Stats(
            schema_version=SCHEMA_VERSION, step=self.states[0].step, mamba_pool_size=len(self.states[0].slots),
            mamba_slots_in_use=0, mamba_slots_peak=0, evicted_mamba_slots=0, evicted_tokens=0, hook_errors=0,
            slots_per_request={}, example_layouts=[],
        )  # fmt: skip

    def publish_rest(self) -> None:
        for i in range(1, len(self.states)):
            self.publisher.publish(delta(i + 1, self.states[i - 1], self.states[i], self.events[i]))

    def stop(self) -> None:
        self.server.close()
        self.publisher.close()


async def _until(pilot, condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


@run_async
async def test_attach_follows_the_engine_and_survives_its_exit() -> None:
    engine = DemoEngine()
    target = Target("127.0.0.1", engine.port)
    source = SessionSource(
        lambda on_frame: Session(target, timeout_s=0.5, heartbeat_s=0.3, on_frame=on_frame), name=f"127.0.0.1:{engine.port}"
    )
    app = InspectorApp(source, checker=demo_checker)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await _until(pilot, lambda: app.view is not None)
            assert app.view.state.step == 40 and source.health().status == "connected"
            engine.publish_rest()
            await _until(pilot, lambda: app.view.state.step == 43)
            await _until(pilot, lambda: [v.slot for v in app.ledger.violations()] == [14])
            assert source.node_changes(app.view.frame) is not None  # deltas reach the views
            engine.stop()
            await _until(pilot, lambda: source.health().status == "disconnected")
            await pilot.pause(0.2)
            assert app.view.state.step == 43 and len(source.frames()) == 4  # history kept
            assert "DISCONNECTED" in str(app.query_one("#header").render())
    finally:
        engine.stop()


def test_a_recording_replays_with_its_events_and_deltas(tmp_path, monkeypatch) -> None:
    """run_replay's loader: a recording written by mcinspect.recording, keyframes and all."""
    from mcinspect.recording import RecordingWriter
    from mcinspect.tui import load_recording, replay_source

    monkeypatch.setattr(replay_source, "KEYFRAME_EVERY", 2)  # frames 1 and 3 rebuild from a keyframe

    states, events = demo_states(), demo_events()
    path = tmp_path / "demo.mcrec"
    with RecordingWriter(path, demo_info()) as writer:
        writer.write(Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(1), state=states[0], counters=Counters()))
        for i in range(1, len(states)):
            writer.write(delta(i + 1, states[i - 1], states[i], events[i]))
    source = load_recording(str(path))
    assert [f.step for f in source.frames()] == [40, 41, 42, 43]
    assert [f.resync for f in source.frames()] == [True, False, False, False]
    assert source.frames()[3].events == tuple(events[3])
    for index, state in enumerate(states):
        rebuilt = source.state_at(index)
        assert (rebuilt.nodes, rebuilt.slots, rebuilt.requests) == (state.nodes, state.slots, state.requests)
    assert source.node_changes(0) is None and 8 in source.node_changes(3).upserted
    assert source.engine() == demo_info() and source.name == "demo.mcrec"
