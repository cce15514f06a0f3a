"""A live view of one scheduler process: snapshot + deltas -> the latest state and its history.

Sync protocol (it avoids the known pitfalls of KV-event streams: silent gaps, a replay applied
after newer live events): handshake (Hello -> EngineInfo), subscribe to the stream FIRST, then
take a snapshot while buffering live deltas;
apply only deltas with seq > snapshot.seq, in seq order. A seq that is not last + 1 is a gap:
fetch the missing deltas from the engine's history ring (GetHistory), or when the ring no longer
holds them, resync from a new snapshot, buffering live deltas meanwhile. If the engine stops
answering, the session reports itself disconnected, keeps its history, and resyncs once the
engine answers again (a restarted engine, a new pid, is resynced from scratch).

History (time travel): the last `history_size` frames, kept by `FrameHistory`
(frame_history.py: deltas with periodic keyframes).

Threads: the sockets belong to one thread (the caller of `poll`, or the reader thread started by
`start_reader`); `latest`, `history`, `state_at` and `counters` may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import zmq

from .client import EngineRefused, EngineUnreachable, Requester, client_socket, unreachable_reason
from .errors import McinspectError
from .frame_history import FrameEvicted, FrameHistory, delta_towards  # noqa: F401  (FrameEvicted: what state_at raises)
from .schema import (
    EVERY_STEP_TOPIC,
    SCHEMA_VERSION,
    STREAM_TOPIC,
    CacheState,
    Counters,
    Delta,
    EngineInfo,
    Event,
    GetHistory,
    GetSnapshot,
    Hello,
    History,
    Reply,
    Request,
    Snapshot,
    apply_delta,
    copy_state,
)
from .target import Target, zmq_address
from .untrusted import DECODE_FAILURES

logger = logging.getLogger("mcinspect.session")

_SLICE_S = 0.1
"""Longest a wait goes without looking at the close flag."""
_MAX_DRAIN = 10_000
"""Stream messages read per drain, so one poll stays bounded on a fire hose."""


class SessionError(McinspectError):
    """The session was used the wrong way (not connected, or from a thread that does not own it)."""


class SessionClosed(SessionError):
    """The session was closed."""


@dataclass(frozen=True)
class FrameInfo:
    """One step as the session saw it (cheap: no state)."""

    index: int
    """Session-local frame number, consecutive; survives engine restarts, unlike seq."""
    seq: int
    step: int
    received_at: float
    """Wall-clock time the frame was applied."""
    events: tuple[Event, ...]
    """What happened during the step; empty for a resync frame."""
    engine: Counters
    resync: bool
    """The frame came from a snapshot: steps (and their events) before it may be missing."""


@dataclass(frozen=True)
class Frame:
    """A frame with its state. The state is shared with other readers: treat it as read-only."""

    info: FrameInfo
    state: CacheState


@dataclass(frozen=True)
class SessionCounters:
    """Health of the session, for the views."""

    connected: bool
    last_seq: int
    frames: int
    deltas_applied: int
    gaps: int
    """Times the next seq was missing (from a PUB drop, a queue drop, or a late subscription)."""
    history_fills: int
    """Gaps closed from the engine's history ring."""
    resyncs: int
    """Snapshots taken after the first one."""
    stale: int
    """Stream deltas ignored because the state already included them."""
    bad_frames: int
    buffer_overflows: int
    disconnects: int
    engine: Counters
    last_error: str


@dataclass(frozen=True)
class PollResult:
    """What one `poll` changed."""

    new_frames: int
    connected: bool
    connection_changed: bool

    @property
    def changed(self) -> bool:
        """Worth a redraw: new frames, or connected / disconnected."""
        return self.new_frames > 0 or self.connection_changed


@dataclass
class _Counts:
    deltas_applied: int = 0
    gaps: int = 0
    history_fills: int = 0
    snapshots: int = 0
    stale: int = 0
    bad_frames: int = 0
    buffer_overflows: int = 0
    disconnects: int = 0
    frames: int = 0
    engine: Counters = field(default_factory=Counters)
    last_error: str = ""


def _identity(info: EngineInfo) -> tuple[int, int, int]:
    """What changes when the engine behind a port is a different process."""
    return info.pid, info.request_port, info.stream_port


class Session:
    """A live, resyncing view of one scheduler process (see the module docstring)."""

    def __init__(
        self,
        target: Target,
        *,
        token: str = "",
        every_step: bool = True,
        timeout_s: float = 5.0,
        heartbeat_s: float = 2.0,
        history_size: int = 1000,
        keyframe_every: int = 100,
        rcv_hwm: int = 100_000,
        buffer_limit: int = 100_000,
        context: zmq.Context | None = None,
        on_frame: Callable[[FrameInfo, Delta | Snapshot], None] | None = None,
    ) -> None:
        """Nothing connects until `connect()`.

        every_step asks the engine to capture every scheduler step while this session is
        subscribed (what recorders and checkers need); False takes the live stream, captured
        as often as the engine's inspector time budget allows (a view: a few frames a second).

        timeout_s bounds every request. Every heartbeat_s without a reply the session asks
        whether the engine is still there and still the same process (Hello: the stream alone
        cannot tell, a restarted engine's seqs may look like ours) and for any deltas after the
        last one it has (GetHistory: a lost last delta leaves no gap to see); once the engine
        is gone it retries that often.
        rcv_hwm bounds the stream messages ZMQ queues for us; buffer_limit those buffered while
        a snapshot or history request is in flight (past either, a gap and a resync follow).
        on_frame runs on the owning thread for every frame, in order, with what produced it: the
        Delta, or the Snapshot of a resync (recordings are written from it).
        """
        if history_size < 1 or keyframe_every < 1:
            raise ValueError("history_size and keyframe_every must be at least 1")
        self.target = target
        self._token = token
        self._every_step = every_step
        self._timeout_s = timeout_s
        self._heartbeat_s = heartbeat_s
        self._rcv_hwm = rcv_hwm
        self._buffer_limit = buffer_limit
        self._context = context or zmq.Context.instance()
        self._decoder = msgspec.msgpack.Decoder(Delta)
        self._lock = threading.Lock()  # guards what readers see: history, live state, counts
        self._history = FrameHistory(history_size, keyframe_every)
        self._live: CacheState | None = None
        self._latest: Frame | None = None
        self._counts = _Counts()
        self._info: EngineInfo | None = None
        self._connected = False
        self._last_seq = 0
        self._following = True
        """Buffer the stream (False while disconnected: a resync follows anyway)."""
        self._buffer: dict[int, bytes | Delta] = {}
        self._requester: Requester | None = None
        self._sub: zmq.Socket | None = None
        self._last_reply = 0.0
        self._next_attempt = 0.0
        self._closed = threading.Event()
        self._reader: threading.Thread | None = None
        self._on_frame = on_frame
        self._unannounced: list[tuple[FrameInfo, Delta | Snapshot]] = []

    # --- reading (any thread) ---------------------------------------------------------

    @property
    def info(self) -> EngineInfo | None:
        """The engine's handshake, once connected."""
        return self._info

    @property
    def connected(self) -> bool:
        """Following the engine (False before connect, while it is gone, and after close)."""
        return self._connected

    def latest(self) -> Frame | None:
        """The newest frame (None before the first snapshot); its state is read-only.

        The state is copied once per new frame (O(state) shallow copy), then shared by callers."""
        with self._lock:
            if self._latest is None and self._live is not None and self._history.entries:
                self._latest = Frame(self._history.entries[-1].info, copy_state(self._live))
            return self._latest

    def history(self) -> list[FrameInfo]:
        """The frames still held, oldest first."""
        with self._lock:
            return [entry.info for entry in self._history.entries]

    def state_at(self, index: int) -> CacheState:
        """A fresh copy of the state at frame `index`; raises FrameEvicted outside the window."""
        with self._lock:
            return self._history.state_at(index)

    def delta_at(self, index: int) -> Delta | None:
        """The stream delta that made frame `index` of the frame before it (None for a resync:
        its delta is the session's own difference towards a snapshot); raises FrameEvicted
        outside the window."""
        with self._lock:
            info, delta = self._history.frame_at(index)
        return None if info.resync else delta

    def counters(self) -> SessionCounters:
        """The session's health counters and the engine's latest ones."""
        c = self._counts
        with self._lock:
            return SessionCounters(
                connected=self._connected, last_seq=self._last_seq, frames=c.frames,
                deltas_applied=c.deltas_applied, gaps=c.gaps, history_fills=c.history_fills,
                resyncs=max(0, c.snapshots - 1), stale=c.stale, bad_frames=c.bad_frames,
                buffer_overflows=c.buffer_overflows, disconnects=c.disconnects, engine=c.engine,
                last_error=c.last_error,
            )  # fmt: skip

    # --- driving (the owning thread) --------------------------------------------------

    def connect(self) -> EngineInfo:
        """Handshake, subscribe, take the first snapshot; raises EngineUnreachable / EngineRefused."""
        if self._closed.is_set():
            raise SessionClosed("the session is closed")
        if self._requester is not None:
            raise SessionError("connect() was already called")
        self._requester = Requester(self.target, self._context, token=self._token)
        try:
            info = self._hello()
            self._subscribe(info.stream_port)
            self._info = info
            self._resync()
        except BaseException:
            self._close_sockets()
            raise
        self._connected = True
        self._announce()
        return info

    def poll(self, timeout_s: float = 0.1) -> PollResult:
        """Read the stream for up to timeout_s (plus a request's timeout while recovering)."""
        if self._reader is not None and threading.current_thread() is not self._reader:
            raise SessionError("a reader thread owns this session; read with latest()/history()")
        return self._poll(timeout_s)

    def start_reader(self, on_update: Callable[[PollResult], None] | None = None, poll_s: float = 0.1) -> None:
        """Poll on a daemon thread until close(); `on_update` runs there after each change."""
        if self._requester is None:
            raise SessionError("connect() first")
        self._reader = threading.Thread(target=self._read_loop, args=(on_update, poll_s), name="mcinspect-session", daemon=True)
        self._reader.start()

    def close(self) -> None:
        """Stop the reader thread (if any) and close the sockets; the history stays readable."""
        self._closed.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(self._timeout_s + 1)
        self._close_sockets()
        self._connected = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- internals ----------------------------------------------------------------------

    def _read_loop(self, on_update: Callable[[PollResult], None] | None, poll_s: float) -> None:
        while not self._closed.is_set():
            try:
                result = self._poll(poll_s)
                if result.changed and on_update is not None:
                    on_update(result)
            except SessionClosed:
                return
            except Exception as exc:  # noqa: BLE001 - the reader must outlive a bug; it is logged and shown
                logger.exception("mcinspect session reader")
                self._counts.last_error = f"internal error: {exc}"
                self._closed.wait(poll_s)

    def _poll(self, timeout_s: float) -> PollResult:
        if self._closed.is_set():
            raise SessionClosed("the session is closed")
        if self._requester is None or self._sub is None:
            raise SessionError("connect() first")
        frames_before, was_connected = self._counts.frames, self._connected
        try:
            if self._connected:
                if self._sub.poll(int(timeout_s * 1000)):
                    self._drain()
                self._catch_up()
                if time.monotonic() - self._last_reply > self._heartbeat_s:
                    self._check_engine()
            elif time.monotonic() >= self._next_attempt:
                self._reconnect()
            else:
                self._closed.wait(min(timeout_s, self._next_attempt - time.monotonic()))
                self._drain()  # discarded while disconnected: a resync follows anyway
        except (EngineUnreachable, EngineRefused) as exc:
            self._disconnected(str(exc))
        self._announce()
        return PollResult(self._counts.frames - frames_before, self._connected, self._connected != was_connected)

    def _announce(self) -> None:
        """Hand new frames to on_frame, outside the lock (it may do I/O)."""
        pending, self._unannounced = self._unannounced, []
        for info, source in pending:
            self._on_frame(info, source)  # type: ignore[misc]

    def _hello(self) -> EngineInfo:
        info = self._call(Hello(schema_version=SCHEMA_VERSION, token=self._token))
        if not isinstance(info, EngineInfo):
            raise EngineRefused(f"the engine answered Hello with {type(info).__name__}")
        return info

    def _subscribe(self, stream_port: int) -> None:
        if self._sub is not None:
            self._sub.close(linger=0)
        # The stream port shares the request port's key (one per engine, mcinspect/auth.py).
        self._sub = client_socket(self._context, zmq.SUB, self.target.host, self.target.port, self._token)
        self._sub.setsockopt(zmq.RCVHWM, self._rcv_hwm)
        self._sub.setsockopt(zmq.SUBSCRIBE, STREAM_TOPIC)
        if self._every_step:
            self._sub.setsockopt(zmq.SUBSCRIBE, EVERY_STEP_TOPIC)
        self._sub.connect(zmq_address(self.target.host, stream_port))

    def _call(self, message: Request) -> Reply:
        """One request; the stream keeps being buffered while the reply is awaited."""
        assert self._requester is not None
        requester = self._requester
        requester.send(message)
        poller = zmq.Poller()
        poller.register(requester.socket, zmq.POLLIN)
        if self._sub is not None:
            poller.register(self._sub, zmq.POLLIN)
        deadline = time.monotonic() + self._timeout_s
        while (remaining := deadline - time.monotonic()) > 0 and not self._closed.is_set():
            ready = dict(poller.poll(int(min(remaining, _SLICE_S) * 1000) + 1))
            if self._sub is not None and self._sub in ready:
                self._drain()
            if requester.socket in ready:
                self._last_reply = time.monotonic()
                return requester.receive()
        requester.reset()  # a late reply must not answer the next request
        if self._closed.is_set():
            raise SessionClosed("the session is closed")
        raise EngineUnreachable(unreachable_reason(self.target, self._timeout_s, self._token))

    def _drain(self) -> None:
        """Move waiting stream messages into the buffer (or drop them: stale, bad, overflow)."""
        assert self._sub is not None
        counts = self._counts
        for _ in range(_MAX_DRAIN):
            try:
                frames = self._sub.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 3 or frames[0] != STREAM_TOPIC or len(frames[1]) != 8:
                counts.bad_frames += 1
                continue
            seq = int.from_bytes(frames[1], "big")
            if not self._following:
                continue
            if seq <= self._last_seq:
                counts.stale += 1
            elif len(self._buffer) >= self._buffer_limit:
                counts.buffer_overflows += 1
            else:
                self._buffer[seq] = frames[2]

    def _catch_up(self) -> None:
        """Apply buffered deltas in order; close a gap from history, else from a snapshot."""
        for _ in range(2):  # bounded: a gap that survives a snapshot waits for the next poll
            if not self._apply_buffered():
                return
            self._counts.gaps += 1
            if self._fill_from_history():
                self._counts.history_fills += 1
                return
            self._resync()

    def _apply_buffered(self) -> bool:
        """Apply the consecutive run after last_seq; True when a gap remains."""
        while (item := self._buffer.pop(self._last_seq + 1, None)) is not None:
            if isinstance(item, bytes):
                try:
                    item = self._decoder.decode(item)
                except DECODE_FAILURES:  # RecursionError included: a hostile publisher
                    self._counts.bad_frames += 1
                    break
            if item.seq != self._last_seq + 1 or item.schema_version != SCHEMA_VERSION:
                self._counts.bad_frames += 1
                break
            self._apply(item)
        return bool(self._buffer)

    def _apply(self, delta: Delta) -> None:
        assert self._live is not None
        with self._lock:
            apply_delta(self._live, delta)
            self._record(delta.seq, delta.step, delta.events, delta.counters, delta, resync=False, source=delta)
            self._counts.deltas_applied += 1

    def _record(
        self, seq: int, step: int, events: list[Event], engine: Counters, delta: Delta | None, *, resync: bool, source: Delta | Snapshot
    ) -> None:
        """Append the frame for the state just reached (caller holds the lock)."""
        assert self._live is not None
        info = FrameInfo(self._counts.frames, int(seq), int(step), time.time(), tuple(events), engine, resync)
        self._history.append(info, delta, self._live)
        if self._on_frame is not None:
            self._unannounced.append((info, source))
        self._last_seq = int(seq)
        self._latest = None
        self._counts.frames += 1
        self._counts.engine = engine

    def _fill_from_history(self) -> bool:
        """Ask the engine's ring for the missing deltas; True when no gap remains."""
        try:
            reply = self._call(GetHistory(schema_version=SCHEMA_VERSION, after_seq=self._last_seq, token=self._token))
        except EngineRefused:
            return False  # the ring has moved past the gap: a snapshot it is
        if not isinstance(reply, History):
            return False
        for delta in reply.deltas:
            if delta.seq > self._last_seq:
                self._buffer[int(delta.seq)] = delta
        return not self._apply_buffered()

    def _resync(self) -> None:
        """Take a snapshot (the stream is buffered meanwhile) and apply what came after it."""
        snapshot = self._call(GetSnapshot(schema_version=SCHEMA_VERSION, token=self._token))
        if not isinstance(snapshot, Snapshot):
            raise EngineRefused(f"the engine answered GetSnapshot with {type(snapshot).__name__}")
        with self._lock:
            diff = None if self._live is None else delta_towards(self._live, snapshot)
            if diff is not None:
                apply_delta(self._live, diff)  # keeps the records that did not change: shared
            if diff is None or self._live != snapshot.state:
                diff, self._live = None, snapshot.state  # not expressible as a delta: a keyframe
            self._record(snapshot.seq, snapshot.state.step, [], snapshot.counters, diff, resync=True, source=snapshot)
            self._counts.snapshots += 1
        for seq in [s for s in self._buffer if s <= self._last_seq]:
            del self._buffer[seq]
        self._apply_buffered()

    def _check_engine(self) -> None:
        """Heartbeat: is the engine still there, still the same process, and did we miss a tail?"""
        info = self._hello()
        if self._info is not None and _identity(info) != _identity(self._info):
            self._adopt(info)
            return
        # A lost last delta is invisible on the stream (no later seq reveals the gap): ask the ring.
        frames = self._counts.frames
        if not self._fill_from_history():
            self._counts.gaps += 1
            self._resync()
        elif self._counts.frames > frames:
            self._counts.gaps += 1
            self._counts.history_fills += 1

    def _reconnect(self) -> None:
        self._next_attempt = time.monotonic() + self._heartbeat_s
        self._adopt(self._hello())
        self._connected = True

    def _adopt(self, info: EngineInfo) -> None:
        """Follow a (possibly restarted) engine: new stream port, new seq space, fresh snapshot."""
        if self._info is None or info.stream_port != self._info.stream_port:
            self._subscribe(info.stream_port)
        self._info = info
        self._buffer.clear()  # seqs of another process, or of a stream we stopped following
        self._last_seq = 0  # buffer every seq until the snapshot says which ones it includes
        self._following = True
        self._resync()

    def _disconnected(self, reason: str) -> None:
        if self._connected:
            self._counts.disconnects += 1
            self._connected = False
        self._counts.last_error = reason
        self._following = False
        self._buffer.clear()
        self._next_attempt = time.monotonic() + self._heartbeat_s

    def _close_sockets(self) -> None:
        if self._requester is not None:
            self._requester.close()
            self._requester = None
        if self._sub is not None:
            self._sub.close(linger=0)
            self._sub = None
