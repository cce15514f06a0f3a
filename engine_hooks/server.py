"""The request socket of one scheduler process: a ZMQ ROUTER served on its own thread.

The scheduler never waits on it: replies come from callables that take a consistent copy under
the inspector's lock, and the (possibly large) encoding happens here, on the server thread,
within a share of the wall time (request_budget.py); a snapshot that did not change since the
last one is sent again as the bytes already encoded. Malformed, oversized, too deep,
wrong-version, wrong-type, bad-token and over-rate requests get an ErrorReply (or, beyond ZMQ's
hard size limit, are cut off by ZMQ) and are counted; per client only a rate bucket is kept.

The thread cannot die of a request: each is answered inside a guard, and the loop itself
survives any exception (counted in `errors`, logged); `ensure_serving()` restarts a thread that
stopped anyway. Peers must pass CURVE (mcinspect/auth.py) before ZMQ hands us a byte.

Dispatch is one table, request type -> handler (`_handlers`): a new request type is an entry
in `schema.Request` and one here.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import msgspec
import zmq

from mcinspect.auth import CurveKeys, secure_server
from mcinspect.schema import (
    MAX_REQUEST_BYTES,
    SCHEMA_VERSION,
    Delta,
    EngineInfo,
    ErrorReply,
    GetHistory,
    GetSnapshot,
    GetStats,
    Hello,
    History,
    Reply,
    Request,
    Snapshot,
    Stats,
)
from mcinspect.target import allow_ipv6, zmq_address
from mcinspect.untrusted import MAX_DEPTH, DecodeFailed, decode, msgpack_depth_exceeds

from . import growing_runs
from .published_state import SnapshotParts
from .publisher import HistoryWindow
from .request_budget import ClientRates, TimeShare
from .rested_encode import Encoded, encode_rested
from .rested_free import free_rested

logger = logging.getLogger("mcinspect.engine_hooks")

HARD_LIMIT_BYTES = 4 * MAX_REQUEST_BYTES
"""ZMQ drops the connection of a peer sending a frame above this, before we can read it.

Between MAX_REQUEST_BYTES and this, the request is read and refused with a reason, so a
confused client learns why; above it, memory stays bounded and the peer just gets no answer."""

_RCV_HWM = 100
"""Queued inbound messages per peer: with HARD_LIMIT_BYTES, bounds what a flood can make us hold."""

_POLL_MS = 100
"""How often the server thread looks at its stop flag while idle."""

_ERROR_PAUSE_S = 0.1
"""After the loop itself failed (not a request): a pause, so a broken socket cannot spin."""

Answer = Reply | Encoded
"""A reply to encode, or one already encoded (a snapshot sent again)."""


class _VersionProbe(msgspec.Struct):
    """Reads only `schema_version` from an otherwise undecodable request, for a clearer refusal."""

    schema_version: int


class RequestServer:
    """Answers the requests of `schema.Request` on a ROUTER socket."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        token: str,
        info: EngineInfo,
        snapshot: Callable[[], Snapshot | SnapshotParts],
        history: Callable[[int], HistoryWindow | None],
        stats: Callable[[], Stats],
        handlers: Mapping[type, Callable[[Any], Reply]] | None = None,
        keys: CurveKeys | None = None,
        time_share: TimeShare | None = None,
        rates: ClientRates | None = None,
        rest: Callable[[float], None] = time.sleep,
    ) -> None:
        """Bind now (a taken port raises here); `start()` serves.

        `snapshot` and `stats` are called on the server thread and must be thread-safe;
        `snapshot` returns the same object while nothing changed (its encoding is reused).
        `history` is `Publisher.history_after`; `handlers` answer further request types
        (request type -> thread-safe handler). An empty `token` disables the token check;
        `keys` None serves without CURVE. `rest`: the rest between the pieces of a big reply's
        encoding and of an old snapshot's freeing (rested_encode.py).
        """
        self._rest = rest
        self.info = info
        self._token = token.encode()
        self._snapshot = snapshot
        self._history = history
        self._stats = stats
        self._time_share = time_share or TimeShare()
        self._rates = rates or ClientRates()
        self.rejected = 0
        """Requests refused or dropped (written by the server thread only)."""
        self.errors = 0
        """Requests whose answer failed inside mcinspect, and failures of the loop (bugs, logged)."""
        self.restarts = 0
        """Times `ensure_serving` found the thread dead and started another."""
        self.busy_seconds = 0.0
        """CPU time the server thread spent on requests (it holds the GIL meanwhile)."""
        self._handlers: dict[type, Callable[[Any], Answer]] = {
            Hello: lambda request: self.info,
            GetSnapshot: self._answer_snapshot,
            GetHistory: self._answer_history,
            GetStats: lambda request: self._stats(),
            **(handlers or {}),
        }
        self._encoded: tuple[Snapshot | SnapshotParts, Encoded] | None = None
        """The last snapshot sent and its encoding."""
        self._decoder = msgspec.msgpack.Decoder(Request)
        self._probe = msgspec.msgpack.Decoder(_VersionProbe)
        self._encoder = growing_runs.encoder()  # server thread only
        self._rate_limited = self._encoder.encode(
            ErrorReply(schema_version=SCHEMA_VERSION, reason=f"too many requests: at most {self._rates.rate:g} a second per client")
        )
        self._stop = threading.Event()
        self._socket = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, HARD_LIMIT_BYTES)
        self._socket.setsockopt(zmq.RCVHWM, _RCV_HWM)
        allow_ipv6(self._socket, host)
        secure_server(self._socket, keys)
        self._socket.bind(zmq_address(host, port))
        self.port = int(self._socket.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        """The bound port."""
        self._thread = self._new_thread()

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread.start()

    def ensure_serving(self) -> None:
        """Restart the server thread if it stopped without being asked to (cheap: call often)."""
        if self._thread.ident is not None and not self._thread.is_alive() and not self._stop.is_set():
            self.restarts += 1
            logger.error("mcinspect: the request thread stopped; restarting it")
            self._thread = self._new_thread()
            self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop serving and close the socket (ZMQ frees the port shortly after, asynchronously)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._socket.close(linger=0)

    def _new_thread(self) -> threading.Thread:
        return threading.Thread(target=self._serve, name="mcinspect-requests", daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._serve_one()
            except zmq.ZMQError as exc:
                if exc.errno == zmq.ETERM:  # the context is going away at process exit
                    return
                self._loop_failed(exc)
            except Exception as exc:  # noqa: BLE001 - the loop outlives any bug of mcinspect
                self._loop_failed(exc)

    def _loop_failed(self, exc: Exception) -> None:
        self.errors += 1
        logger.error("mcinspect: request loop: %s: %s", type(exc).__name__, exc)
        self._stop.wait(_ERROR_PAUSE_S)

    def _serve_one(self) -> None:
        wait_s = self._time_share.wait_s(time.perf_counter())
        if wait_s > 0:
            self._stop.wait(wait_s)  # the requests wait in ZMQ's bounded queues
            return
        if not self._socket.poll(_POLL_MS):
            return
        began, began_cpu = time.perf_counter(), time.thread_time()
        identity, payload = self._receive()
        if not self._rates.admit(identity, began):
            self.rejected += 1
            reply = self._rate_limited
        else:
            if payload is None:
                answer: Answer = self._reject("a request is exactly one frame (use a DEALER socket)")
            else:
                answer = self.answer(payload)
            reply = answer if isinstance(answer, (bytes, bytearray)) else self._encode(answer)
        try:
            # ROUTER drops a reply to a peer that left or is not reading; never blocks.
            self._socket.send_multipart([identity, reply], flags=zmq.NOBLOCK, copy=len(reply) < 65536)
        except zmq.Again:
            pass  # that peer's queue is full: it will time out and retry
        busy = time.thread_time() - began_cpu
        self.busy_seconds += busy
        self._time_share.spent(busy, time.perf_counter())

    def _encode(self, reply: Reply) -> Encoded:
        try:
            return encode_rested(self._encoder, reply, self._rest)  # a History after a catch-up holds a big delta
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
            return self._encoder.encode(self._fail(f"reply could not be encoded: {exc}"))

    def _receive(self) -> tuple[bytes, bytes | None]:
        """One request as (identity, payload); payload None when it was not exactly one frame."""
        identity = self._socket.recv()
        payload = self._socket.recv() if self._socket.getsockopt(zmq.RCVMORE) else None
        extra = False
        while self._socket.getsockopt(zmq.RCVMORE):
            self._socket.recv()  # drained one by one, each dropped at once
            extra = True
        return identity, None if extra else payload

    def answer(self, payload: bytes) -> Answer:
        """The reply to one raw request payload (never raises)."""
        try:
            return self._answer(payload)
        except Exception as exc:  # noqa: BLE001 - the engine keeps serving whatever mcinspect gets wrong
            logger.exception("mcinspect: answering a request failed")
            return self._fail(f"the request failed inside mcinspect: {exc}")

    def _answer(self, payload: bytes) -> Answer:
        if len(payload) > MAX_REQUEST_BYTES:
            return self._reject(f"request of {len(payload)} bytes exceeds the limit of {MAX_REQUEST_BYTES}")
        if msgpack_depth_exceeds(payload, MAX_DEPTH):
            return self._reject(f"malformed request: nested deeper than {MAX_DEPTH} levels")
        try:
            request = decode(self._decoder, payload, DecodeFailed)
        except DecodeFailed as exc:
            return self._reject(self._decode_failure(payload, str(exc)))
        if request.schema_version != SCHEMA_VERSION:
            return self._reject(_version_reason(request.schema_version))
        if self._token and not hmac.compare_digest(request.token.encode(), self._token):
            return self._reject("bad or missing token")
        try:
            return self._handlers[type(request)](request)
        except Exception as exc:  # noqa: BLE001 - as above
            logger.exception("mcinspect: answering %s failed", type(request).__name__)
            return self._fail(f"{type(request).__name__} failed inside mcinspect: {exc}")

    def _answer_snapshot(self, request: GetSnapshot) -> Answer:
        snapshot = self._snapshot()
        if self._encoded is not None and self._encoded[0] is snapshot:
            return self._encoded[1]
        encoded = encode_rested(self._encoder, snapshot, self._rest)  # in pieces: the scheduler thread keeps the GIL
        previous, self._encoded = self._encoded, (snapshot, encoded)
        if previous is not None:
            doomed = [previous[0]]
            del previous
            free_rested(doomed, self._rest)  # usually its last holder: freed in pieces, not in one bytecode
        return encoded

    def _answer_history(self, request: GetHistory) -> Answer:
        window = self._history(request.after_seq)
        if window is None:
            return ErrorReply(
                schema_version=SCHEMA_VERSION,
                reason=f"history no longer holds seq {request.after_seq + 1}; take a snapshot",
            )
        # The ring holds encoded deltas: embed them as they are instead of decoding and
        # re-encoding each one; a client decodes the same bytes as list[Delta].
        raw = cast("list[Delta]", [msgspec.Raw(p) for p in window.payloads])
        return History(schema_version=SCHEMA_VERSION, deltas=raw, oldest_seq=window.oldest_seq)

    def _decode_failure(self, payload: bytes, reason: str) -> str:
        try:
            version = decode(self._probe, payload, DecodeFailed).schema_version
        except DecodeFailed:
            return f"malformed request: {reason}"
        if version != SCHEMA_VERSION:
            return _version_reason(version)
        return f"malformed request: {reason}"

    def _reject(self, reason: str) -> ErrorReply:
        self.rejected += 1
        return ErrorReply(schema_version=SCHEMA_VERSION, reason=reason)

    def _fail(self, reason: str) -> ErrorReply:
        self.errors += 1
        return ErrorReply(schema_version=SCHEMA_VERSION, reason=reason)


def _version_reason(version: int) -> str:
    return f"schema version {version} not supported; this engine speaks {SCHEMA_VERSION}"
