"""Attach over real sockets: the engine side's own transport (RequestServer + Publisher) serves
the fault recording (its snapshot, then its deltas); the app connects through SessionSource and
a real Session, follows the deltas, finds what a replay of the same recording finds, and keeps
its history when the engine goes away. The app is shown a frame only once the source knows what
it changed.
"""

from __future__ import annotations

import threading
import time

from recorded_engine import RecordedEngine
from snapshot_apps.replay_app import claimed_twice

from mcinspect.schema import Delta, Snapshot
from mcinspect.session import FrameInfo, Session
from mcinspect.target import Target
from mcinspect.tui import InspectorApp, SessionSource
from mcinspect.tui.session_source import OnFrame
from mcinspect.tui.static_source import StaticFrame

from facts import states
from helpers import pilot_until, run_async
from waiting import until


def _replayed_violations() -> list[tuple[int, tuple[int, ...]]]:
    """(step, slots) of what the stand-in checker finds frame by frame in the recording."""
    fault, found = states("fault"), []
    for index, state in enumerate(fault):
        frame = StaticFrame(index=index, seq=index, step=state.step, received_at=0.0)
        found += [(v.step, v.slots) for v in claimed_twice(fault[index - 1] if index else None, state, frame, None)]
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
