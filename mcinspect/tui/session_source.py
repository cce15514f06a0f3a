"""A DataSource over a live engine, through mcinspect.session.Session."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..schema import CacheState, Delta, EngineInfo, NodeId, Snapshot, VerifyStats
from .source import FrameGone, FrameMeta, NodeChanges, SourceHealth

if TYPE_CHECKING:
    from ..session import FrameInfo, Session
    from ..target import Target
    from ..verify_command import Judged

CHANGES_KEPT = 10_000
"""Frames whose node changes a SessionSource remembers (ids only; the session's history is
1,000 frames by default)."""

OnFrame = Callable[["FrameInfo", Delta | Snapshot], None]
"""Session's `on_frame` callback: each frame with the Delta or Snapshot that produced it."""


class SessionSource:
    """A live engine through `mcinspect.session.Session`.

    The first connect happens on a thread and is retried until it succeeds: the app starts at
    once and shows "connecting". After that the Session's own reader thread reconnects and
    resyncs; this class only translates its state for the app.
    """

    live = True

    def __init__(
        self, make_session: Callable[[OnFrame], Session], name: str, retry_s: float = 2.0, *, target: Target | None = None, token: str = ""
    ) -> None:
        """`make_session(on_frame)` builds an unconnected Session that calls `on_frame` for
        every frame (a failed connect needs a fresh Session, hence a factory); `target` and
        `token` are where verifications are asked for (on sockets of their own)."""
        self.name = name
        self._target = target
        self._token = token
        self._make_session = make_session
        self._retry_s = retry_s
        self._session: Session | None = None
        self._changes: dict[int, NodeChanges | None] = {}
        self._announced = -1
        """The newest frame on_frame has seen: the session's history may hold newer ones, whose
        node changes are not known here yet, so the app is not shown them."""
        self._error = ""
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, notify: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=self._connect_loop, args=(notify,), name="mcinspect-attach", daemon=True)
        self._thread.start()

    def _connect_loop(self, notify: Callable[[], None]) -> None:
        # Imported here: the client side pulls in zmq, which replays and tests never need.
        from ..client import EngineRefused, EngineUnreachable

        while not self._closed.is_set():
            session = self._make_session(self._on_frame)
            try:
                session.connect()
            except (EngineUnreachable, EngineRefused) as exc:
                session.close()
                self._error = str(exc)
                notify()
                self._closed.wait(self._retry_s)
                continue
            if self._closed.is_set():
                session.close()
                return
            self._session = session
            session.start_reader(lambda result: notify())
            notify()
            return

    def _on_frame(self, info: FrameInfo, frame: Delta | Snapshot) -> None:
        """Runs on the session's thread for every frame: remember what it changed."""
        self._changes[info.index] = NodeChanges.of(frame)
        if len(self._changes) > CHANGES_KEPT:
            del self._changes[next(iter(self._changes))]  # dicts keep insertion order: the oldest
        self._announced = info.index

    def node_changes(self, index: int) -> NodeChanges | None:
        return self._changes.get(index)

    def verify(self, nodes: list[NodeId]) -> list[Judged]:
        from ..verify_command import VerifyError, verify_nodes

        if self._target is None:
            raise VerifyError("this view was opened without the engine's address")
        return verify_nodes(self._target, list(nodes), False, token=self._token, timeout_s=5.0, wait_s=120.0)

    def verifier(self) -> VerifyStats | None:
        from ..client import request
        from ..schema import SCHEMA_VERSION, GetStats, Stats

        if self._target is None or self._session is None:
            return None
        reply = request(self._target, GetStats(schema_version=SCHEMA_VERSION, token=self._token), timeout_s=5.0)
        return reply.verify if isinstance(reply, Stats) else None

    def close(self) -> None:
        self._closed.set()
        if self._session is not None:
            self._session.close()

    def engine(self) -> EngineInfo | None:
        return None if self._session is None else self._session.info

    def health(self) -> SourceHealth:
        session = self._session
        if session is None:
            return SourceHealth(status="connecting", last_error=self._error)
        c = session.counters()
        return SourceHealth(
            status="connected" if c.connected else "disconnected",
            dropped=c.engine.dropped,
            gaps=c.gaps,
            resyncs=c.resyncs,
            hook_errors=c.engine.hook_errors,
            last_error=c.last_error,
        )

    def frames(self) -> Sequence[FrameMeta]:
        if self._session is None:
            return []
        return [info for info in self._session.history() if info.index <= self._announced]

    def state_at(self, index: int) -> CacheState:
        from ..session import FrameEvicted

        if self._session is None:
            raise FrameGone("not connected yet")
        try:
            return self._session.state_at(index)
        except FrameEvicted as exc:
            raise FrameGone(str(exc)) from None

    def delta_at(self, index: int) -> Delta | None:
        from ..session import FrameEvicted

        if self._session is None:
            return None
        try:
            return self._session.delta_at(index)
        except FrameEvicted:
            return None
