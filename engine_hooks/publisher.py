"""The delta stream of one scheduler process: a ZMQ XPUB socket fed by a bounded queue.

The scheduler thread only enqueues (`publish`); a daemon thread encodes, sends and keeps a
bounded ring of recent encoded deltas for `GetHistory`. Nothing here can block the scheduler:
a full queue drops the delta (counted; clients see the seq gap and recover), and a slow
subscriber is dropped by ZMQ itself once its send high-water mark is reached.

XPUB (a PUB that hears subscriptions) lets the same thread tell the scheduler whether anyone
is `watched` (without a subscriber the inspector skips per-step capture) and whether some
subscriber wants `every_step` (else the live stream follows the time budget; inspector.py).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import msgspec
import zmq

from mcinspect.auth import CurveKeys, secure_server
from mcinspect.schema import EVERY_STEP_TOPIC, STREAM_TOPIC, Delta
from mcinspect.target import allow_ipv6, zmq_address

from . import growing_runs
from .rested_encode import Encoded, encode_rested

logger = logging.getLogger("mcinspect.engine_hooks")

_POLL_S = 0.1
"""How often the sender thread looks at its stop flag while the queue is empty."""
BUSY_POLL_S = 0.01
"""While deltas flow, the sender thread looks for new ones this often, unasked: waking a
thread blocked on a queue is a system call of the scheduler's (31 us a step, profiled). About
a step of the CPU demo: the thread takes the GIL about as often as when each delta woke it.
At most this much latency on the stream."""
IDLE_AFTER_S = 0.5
"""Without a delta for this long the sender thread blocks until `publish` wakes it."""


class HistoryWindow(NamedTuple):
    """Encoded deltas after some seq, as held in the ring."""

    oldest_seq: int
    """Oldest seq the ring holds (last published + 1 while it is empty)."""
    payloads: list[Encoded]
    """msgpack-encoded `Delta`s, consecutive seqs, oldest first."""


class Publisher:
    """PUB socket + sender thread + history ring for one scheduler process.

    Frames on the wire: [STREAM_TOPIC, seq as 8-byte big-endian, msgpack Delta].
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        queue_size: int = 4096,
        history_size: int = 1024,
        send_hwm: int = 1000,
        keys: CurveKeys | None = None,
        rest: Callable[[float], None] = time.sleep,
    ) -> None:
        """Bind the PUB socket now (a taken port raises here, in the caller's thread).

        Memory held in the engine: at most queue_size Delta objects waiting, history_size
        encoded deltas in the ring, and per subscriber at most send_hwm encoded deltas (plus the
        kernel's socket buffer). send_hwm <= history_size lets a subscriber that fell behind
        usually recover from the ring instead of a snapshot. `keys`: CURVE server keys (a
        subscriber without the engine's key gets nothing, not even a connection); None: open.
        `rest`: the rest between the pieces of a big delta's encoding (rested_encode.py).
        """
        self._rest = rest
        self._queue: deque[Delta] = deque()
        """Unbounded itself; `publish`, the only producer, keeps it within `queue_size`."""
        self._queue_size = queue_size
        self._sleeping = False
        """The sender thread is blocked on `_wake` (read by `publish`, which then wakes it)."""
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._ring: deque[tuple[int, Encoded]] = deque(maxlen=history_size)
        self._ring_lock = threading.Lock()
        self._last_sent = 0
        self._dropped = 0
        self._published = 0
        self._counter_lock = threading.Lock()
        """Serialises the counts' increments (both threads drop); a read of an int needs no lock."""
        self._stop = threading.Event()
        self._topics: set[bytes] = set()
        """Topics some subscriber holds (sender thread only)."""
        self.watched = False
        """Whether some client is subscribed to the stream (plain bools, written by the sender
        thread, read unlocked by the scheduler thread at every step)."""
        self.every_step = False
        """Whether some subscribed client asked for every step (EVERY_STEP_TOPIC)."""
        self._socket = zmq.Context.instance().socket(zmq.XPUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        # Per-subscriber bound: past it ZMQ drops messages for that subscriber only.
        self._socket.setsockopt(zmq.SNDHWM, send_hwm)
        # Subscriptions are the only thing a subscriber sends: they are a few bytes each.
        self._socket.setsockopt(zmq.MAXMSGSIZE, 1024)
        allow_ipv6(self._socket, host)
        secure_server(self._socket, keys)
        self._socket.bind(zmq_address(host, port))
        self.port = int(self._socket.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        """The bound port (useful when constructed with port 0)."""
        self._thread = threading.Thread(target=self._run, name="mcinspect-publisher", daemon=True)

    def start(self) -> None:
        """Start the sender thread; deltas published before this wait in the queue."""
        self._thread.start()

    def publish(self, delta: Delta) -> None:
        """Enqueue `delta` for sending; never blocks, never raises.

        Call in seq order (the inspector assigns seqs under its lock and publishes under it).
        The delta and its lists must not be mutated afterwards: the sender thread encodes it later.
        """
        if len(self._queue) >= self._queue_size:
            self._count_drop()
            return
        self._queue.append(delta)
        if self._sleeping:  # read after the append: see _wait
            self._wake.put(None)

    @property
    def published(self) -> int:
        """Deltas handed to ZMQ (a slow subscriber may still miss some)."""
        return self._published

    @property
    def dropped(self) -> int:
        """Deltas that never reached the wire (queue full, or could not be encoded)."""
        return self._dropped

    def history_after(self, after_seq: int) -> HistoryWindow | None:
        """Encoded deltas with seq > after_seq, or None if some of them left the ring already."""
        with self._ring_lock:
            if not self._ring:
                return HistoryWindow(self._last_sent + 1, [])
            oldest = self._ring[0][0]
            if after_seq + 1 < oldest:
                return None
            start = min(after_seq + 1 - oldest, len(self._ring))
            return HistoryWindow(oldest, [payload for _, payload in itertools.islice(self._ring, start, None)])

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop the sender thread and close the socket; queued deltas are discarded.

        ZMQ frees the port shortly after this returns, asynchronously."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        elif self._thread.ident is None:  # never started: the socket is still ours
            self._socket.close(linger=0)

    def _run(self) -> None:
        encoder = growing_runs.encoder()  # one per thread: no sharing with other threads
        last_delta = 0.0
        try:
            while not self._stop.is_set():
                self._read_subscriptions()
                if self._queue:
                    self._send(encoder, self._queue.popleft())
                    last_delta = time.monotonic()
                elif time.monotonic() - last_delta < IDLE_AFTER_S:
                    time.sleep(BUSY_POLL_S)
                else:
                    self._wait()
        finally:
            self._socket.close(linger=0)

    def _wait(self) -> None:
        """Block until `publish` wakes this thread (or _POLL_S passes). `_sleeping` is set before
        the queue is looked at and `publish` reads it after its append, so one of the two sees
        the other: no delta waits for the timeout."""
        self._sleeping = True
        try:
            if not self._queue:
                self._wake.get(timeout=_POLL_S)
        except queue.Empty:
            pass
        finally:
            self._sleeping = False

    def _send(self, encoder: msgspec.msgpack.Encoder, delta: Delta) -> None:
        try:
            payload = encode_rested(encoder, delta, self._rest)  # a catch-up's delta is big: in pieces, with rests
            seq = int(delta.seq)
            header = seq.to_bytes(8, "big")
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            # A hook built a delta that cannot go on the wire: dropped (clients see a gap).
            self._count_drop()
            logger.error("mcinspect: a delta could not be encoded and was dropped: %s", exc)
            return
        with self._ring_lock:
            # The ring only ever holds consecutive seqs, so `history_after` can answer by index;
            # a hole (a delta dropped from the queue) restarts it.
            if seq != self._last_sent + 1:
                self._ring.clear()
            self._ring.append((seq, payload))
            self._last_sent = seq
        # Into the ring before onto the wire: any seq a client has seen is in the ring.
        try:
            self._socket.send_multipart([STREAM_TOPIC, header, payload], flags=zmq.NOBLOCK, copy=len(payload) < 65536)
        except zmq.Again:
            self._count_drop()  # PUB drops rather than blocks; this guards a libzmq that says so
            return
        with self._counter_lock:
            self._published += 1

    def _read_subscriptions(self) -> None:
        """Track subscribed topics. Without XPUB_VERBOSE, ZMQ passes on only a topic's first
        subscription and its last unsubscription (also when a subscriber's connection dies)."""
        while True:
            try:
                message = self._socket.recv(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            if message[:1] == b"\x01":
                self._topics.add(message[1:])
            elif message[:1] == b"\x00":
                self._topics.discard(message[1:])
            self.every_step = EVERY_STEP_TOPIC in self._topics
            self.watched = STREAM_TOPIC in self._topics

    def _count_drop(self) -> None:
        with self._counter_lock:
            self._dropped += 1
