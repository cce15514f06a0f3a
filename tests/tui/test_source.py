"""SessionSource: connects off the UI thread, retries, and translates the Session's state."""

from __future__ import annotations

import threading

from data import demo_info, demo_states

from mcinspect.client import EngineUnreachable
from mcinspect.schema import Counters
from mcinspect.tui.session_source import SessionSource
from mcinspect.tui.source import FrameGone
from mcinspect.tui.static_source import StaticFrame


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
        self.info = demo_info()
        return self.info

    def start_reader(self, on_update) -> None:
        self.reader = on_update

    def history(self):
        return [StaticFrame(index=7, seq=8, step=40, received_at=0.0)]

    def state_at(self, index: int):
        from mcinspect.session import FrameEvicted

        if index != 7:
            raise FrameEvicted(index)
        return demo_states()[0]

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
    assert source.engine() == demo_info()
    assert [f.index for f in source.frames()] == [7]
    assert source.state_at(7).step == 40
    try:
        source.state_at(3)
    except FrameGone:
        pass
    else:
        raise AssertionError("an evicted frame must raise FrameGone")
    source.close()
