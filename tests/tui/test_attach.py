"""Attach over real sockets: the engine side's own transport (RequestServer + Publisher) serves
the fault recording (its snapshot, then its deltas); the app connects through SessionSource and
a real Session, follows the deltas, finds what a replay of the same recording finds, and keeps
its history when the engine goes away. The app is shown a frame only once the source knows what
it changed.
"""

from __future__ import annotations

import threading
import time

import msgspec
from snapshot_apps.replay_app import RECORDINGS, claimed_twice

from mcinspect.recording import RecordingReader
from mcinspect.schema import SCHEMA_VERSION, Delta, Snapshot, Stats
from mcinspect.session import FrameInfo, Session
from mcinspect.target import Target
from mcinspect.tui import InspectorApp, SessionSource
from mcinspect.tui.session_source import OnFrame
from mcinspect.tui.static_source import StaticFrame
from mcinspect_engine_hooks.publisher import Publisher
from mcinspect_engine_hooks.server import RequestServer

from facts import states
from helpers import pilot_until, run_async
from waiting import until


class RecordedEngine:
    """A recording served through the engine side's real transport (engine_hooks' RequestServer
    and Publisher): its first frame as the snapshot, its deltas published on demand."""

    def __init__(self, name: str) -> None:
        reader = RecordingReader(RECORDINGS / f"{name}.mcrec")
        first, *self.deltas = list(reader)
        assert isinstance(first, Snapshot) and all(isinstance(d, Delta) for d in self.deltas)
        self.snapshot = first
        self.publisher = Publisher("127.0.0.1", 0)
        assert reader.info is not None
        info = msgspec.structs.replace(reader.info, request_port=0, stream_port=self.publisher.port)
        self.server = RequestServer(
            "127.0.0.1", 0, token="", info=info, snapshot=lambda: first, history=self.publisher.history_after, stats=self._stats
        )
        self.port = self.server.port
        self.publisher.start()
        self.server.start()

    def _stats(self) -> Stats:
        return Stats(
            schema_version=SCHEMA_VERSION, step=self.snapshot.state.step, mamba_pool_size=len(self.snapshot.state.slots),
            mamba_slots_in_use=0, mamba_slots_peak=0, evicted_mamba_slots=0, evicted_tokens=0, hook_errors=0,
            slots_per_request={}, example_layouts=[],
        )  # fmt: skip

    def publish_rest(self) -> None:
        for delta in self.deltas:
            self.publisher.publish(delta)

    def stop(self) -> None:
        self.server.close()
        self.publisher.close()


def _replayed_violations() -> list[tuple[int, tuple[int, ...]]]:
    """(step, slots) of what the stand-in checker finds frame by frame in the recording."""
    fault, found = states("fault"), []
    for index, state in enumerate(fault):
        frame = StaticFrame(index=index, seq=index, step=state.step, received_at=0.0)
        found += [(v.step, v.slots) for v in claimed_twice(fault[index - 1] if index else None, state, frame)]
    return found


@run_async
async def test_attach_follows_the_engine_and_survives_its_exit() -> None:
    engine = RecordedEngine("fault")
    newest = engine.deltas[-1].step
    source = SessionSource(
        lambda on_frame: Session(Target("127.0.0.1", engine.port), timeout_s=0.5, heartbeat_s=0.3, on_frame=on_frame),
        name=f"127.0.0.1:{engine.port}",
    )
    app = InspectorApp(source, checks=lambda source: claimed_twice)
    try:
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot_until(pilot, lambda: app.view is not None)
            assert app.view.state == engine.snapshot.state and source.health().status == "connected"
            engine.publish_rest()
            await pilot_until(pilot, lambda: app.view.state.step == newest)
            assert app.view.state == states("fault")[-1]
            expected = _replayed_violations()
            await pilot_until(pilot, lambda: [(v.step, v.violation.slots) for v in app.findings.violations()] == expected)
            assert source.node_changes(app.view.frame) is not None  # deltas reach the views
            engine.stop()
            await pilot_until(pilot, lambda: source.health().status == "disconnected")
            await pilot.pause(0.2)
            assert app.view.state.step == newest and len(source.frames()) == len(engine.deltas) + 1  # history kept
            assert "DISCONNECTED" in str(app.query_one("#header").render())
    finally:
        engine.stop()


def test_a_frame_is_listed_only_once_its_node_changes_are_known() -> None:
    """The session appends a frame to its history before it hands it to on_frame; an app that
    saw it in between would draw it without the delta's changes (CI saw exactly that)."""
    engine = RecordedEngine("fault")
    arrived, release = threading.Event(), threading.Event()

    def held(on_frame: OnFrame) -> OnFrame:
        def hold_the_first_delta(info: FrameInfo, frame: Delta | Snapshot) -> None:
            if info.index == 1:
                arrived.set()
                release.wait(10)
            on_frame(info, frame)

        return hold_the_first_delta

    source = SessionSource(
        lambda on_frame: Session(Target("127.0.0.1", engine.port), timeout_s=0.5, heartbeat_s=0.3, on_frame=held(on_frame)),
        name=f"127.0.0.1:{engine.port}",
    )
    source.start(lambda: None)
    try:
        assert until(lambda: len(source.frames()) == 1, timeout_s=10)
        engine.publish_rest()
        assert arrived.wait(10)
        time.sleep(0.2)
        assert [info.index for info in source.frames()] == [0]
        release.set()
        assert until(lambda: len(source.frames()) == len(engine.deltas) + 1, timeout_s=10)
        assert all(source.node_changes(info.index) is not None for info in source.frames()[1:])
    finally:
        release.set()
        source.close()
        engine.stop()
