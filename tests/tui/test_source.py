"""The sources: SessionSource connects off the UI thread, retries and translates the Session's
state; ReplaySource rebuilds a recording's frames from keyframes and deltas."""

from __future__ import annotations

import threading

from snapshot_apps.replay_app import RECORDINGS, load

from mcinspect.checks.cross_rank import RankKeys
from mcinspect.client import EngineUnreachable
from mcinspect.recording import RecordingReader
from mcinspect.schema import Counters, Delta, Snapshot, apply_delta, copy_state
from mcinspect.tui import load_recording, replay_source
from mcinspect.tui.session_source import SessionSource
from mcinspect.tui.source import DELTAS_WALKED, FrameGone, NodeChanges, deltas_between
from mcinspect.tui.state_cursor import StateCursor
from mcinspect.tui.static_source import StaticFrame
from mcinspect.tui.tree_index import changed_nodes, node_changes

FAULT = load("fault")


class FakeSession:
    """What SessionSource uses of mcinspect.session.Session."""

    attempts = 0

    def __init__(self, on_frame) -> None:
        self.info = None
        self.on_frame = on_frame
        self.reader = None

    def connect(self):
        FakeSession.attempts += 1
        if FakeSession.attempts == 1:
            raise EngineUnreachable("no answer from 127.0.0.1:1 within 5 s")
        self.info = FAULT.engine()
        snapshot = next(iter(RecordingReader(RECORDINGS / "fault.mcrec")))
        self.on_frame(self.history()[0], snapshot)  # a real Session announces its first frame at connect
        return self.info

    def start_reader(self, on_update) -> None:
        self.reader = on_update

    def history(self):
        return [StaticFrame(index=7, seq=8, step=40, received_at=0.0)]

    def state_at(self, index: int):
        from mcinspect.session import FrameEvicted

        if index != 7:
            raise FrameEvicted(index)
        return FAULT.state_at(0)

    def counters(self):
        class C:
            connected = True
            gaps, resyncs, last_error = 2, 1, ""
            engine = Counters(dropped=5, hook_errors=0)

        return C()

    def close(self) -> None:
        pass


def test_connects_after_a_failed_attempt_and_reports_health() -> None:
    FakeSession.attempts = 0
    notified = threading.Event()
    source = SessionSource(FakeSession, name="127.0.0.1:1", retry_s=0.01)
    assert source.health().status == "connecting"
    source.start(notified.set)
    source._thread.join(5)
    assert FakeSession.attempts == 2 and notified.is_set()
    health = source.health()
    assert (health.status, health.dropped, health.gaps, health.resyncs) == ("connected", 5, 2, 1)
    assert source.engine() == FAULT.engine()
    assert [f.index for f in source.frames()] == [7]
    assert source.state_at(7) == FAULT.state_at(0)
    try:
        source.state_at(3)
    except FrameGone:
        pass
    else:
        raise AssertionError("an evicted frame must raise FrameGone")
    source.close()


def test_a_recording_replays_with_its_events_and_deltas(monkeypatch) -> None:
    """Every frame rebuilt from the keyframe before it equals the recording applied in order."""
    monkeypatch.setattr(replay_source, "KEYFRAME_EVERY", 7)
    path = RECORDINGS / "fault.mcrec"
    frames = list(RecordingReader(path))
    source = load_recording(str(path))
    assert isinstance(frames[0], Snapshot) and all(isinstance(frame, Delta) for frame in frames[1:])
    assert [f.resync for f in source.frames()] == [True] + [False] * (len(frames) - 1)
    state = copy_state(frames[0].state)
    for index, frame in enumerate(frames):
        if isinstance(frame, Delta):
            apply_delta(state, frame)
            assert source.frames()[index].events == tuple(frame.events)
            assert source.node_changes(index) == NodeChanges.of(frame)
        assert source.frames()[index].step == state.step
        assert source.state_at(index) == state
    assert source.node_changes(0) is None and source.name == "fault.mcrec"
    assert source.engine() == RecordingReader(path).info


def test_a_state_cursor_walks_a_recording_by_its_deltas() -> None:
    """Forward, the cursor's state is the source's, and what changed is what the deltas between
    touched; asked for an earlier frame, or past a frame without a delta, it rebuilds (None)."""
    source = load("fault")
    cursor = StateCursor(source)
    state, changed = cursor.at(0)
    assert state == source.state_at(0) and changed is None
    last = 0
    for index in range(2, len(source.frames()), 3):
        state, changed = cursor.at(index)
        assert state == source.state_at(index)
        expected = RankKeys()
        for between in range(last + 1, index + 1):
            expected.update(RankKeys.of_delta(source.delta_at(between)))
        assert changed == expected and (changed.nodes or changed.slots or changed.requests)
        last = index
    assert cursor.at(1) == (source.state_at(1), None)
    assert source.delta_at(0) is None  # the recording's snapshot


def test_frames_a_few_apart_are_joined_by_the_deltas_between() -> None:
    """A frame's state moved by `deltas_between` is the later frame's, and their joined node
    changes name what a scan of both trees finds; too far apart, or backwards, there are none."""
    source = load("fault")
    last = len(source.frames()) - 1
    for start, gap in ((0, 1), (0, 7), (5, 10), (20, 3), (last - 12, 12)):
        deltas = deltas_between(source, start, start + gap)
        assert deltas is not None and len(deltas) == gap
        state = source.state_at(start)
        before = dict(state.nodes)
        for delta in deltas:
            apply_delta(state, delta)
        assert state == source.state_at(start + gap)
        changed, removed = node_changes(before, state.nodes, NodeChanges.across(deltas))
        scanned, scanned_removed = changed_nodes(before, state.nodes)
        assert {n.id for n in changed} >= {n.id for n in scanned} and removed == scanned_removed
    assert deltas_between(source, 3, 3) == [] and deltas_between(source, 4, 3) is None
    assert deltas_between(source, 0, DELTAS_WALKED + 1) is None
