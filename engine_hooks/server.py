"""The request socket of one scheduler process: a ZMQ ROUTER served on its own thread.

The scheduler never waits on it: replies come from callables that take a consistent copy under
the inspector's lock, and the (possibly large) encoding happens here, on the server thread.
Malformed, oversized, wrong-version, wrong-type or bad-token requests get an ErrorReply (or,
beyond ZMQ's hard size limit, are cut off by ZMQ) and are counted; nothing is kept per peer.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

import msgspec
import zmq

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

from .publisher import HistoryWindow

logger = logging.getLogger("mcinspect.engine_hooks")

HARD_LIMIT_BYTES = 4 * MAX_REQUEST_BYTES
"""ZMQ drops the connection of a peer sending a frame above this, before we can read it.

Between MAX_REQUEST_BYTES and this, the request is read and refused with a reason, so a
confused client learns why; above it, memory stays bounded and the peer just gets no answer."""

_RCV_HWM = 100
"""Queued inbound frames per peer: with HARD_LIMIT_BYTES, bounds what a flood can make us hold."""

_POLL_MS = 100
"""How often the server thread looks at its stop flag while idle."""


class _VersionProbe(msgspec.Struct):
    """Reads only `schema_version` from an otherwise undecodable request, for a clearer refusal."""

    schema_version: int


class RequestServer:
    """Answers Hello, GetSnapshot, GetHistory, GetStats and the `handlers`' types on a ROUTER socket."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        token: str,
        info: EngineInfo,
        snapshot: Callable[[], Snapshot],
        history: Callable[[int], HistoryWindow | None],
        stats: Callable[[], Stats],
        handlers: Mapping[type, Callable[[Any], Reply]] | None = None,
    ) -> None:
        """Bind now (a taken port raises here); `start()` serves.

        `snapshot` and `stats` are called on the server thread and must be thread-safe;
        `history` is `Publisher.history_after`; `handlers` answer further request types
        (request type -> thread-safe handler). An empty `token` disables the token check.
        """
        self.info = info
        self._token = token.encode()
        self._snapshot = snapshot
        self._history = history
        self._stats = stats
        self._handlers = dict(handlers or {})
        self.rejected = 0
        """Requests refused or dropped (written by the server thread only)."""
        self.errors = 0
        """Requests whose answer failed inside mcinspect (a bug, logged)."""
        self._decoder = msgspec.msgpack.Decoder(Request)
        self._probe = msgspec.msgpack.Decoder(_VersionProbe)
        self._stop = threading.Event()
        self._socket = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, HARD_LIMIT_BYTES)
        self._socket.setsockopt(zmq.RCVHWM, _RCV_HWM)
        self._socket.bind(f"tcp://{host}:{port}")
        self.port = int(self._socket.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        """The bound port."""
        self._thread = threading.Thread(target=self._serve, name="mcinspect-requests", daemon=True)

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop serving and close the socket (ZMQ frees the port shortly after, asynchronously)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        elif self._thread.ident is None:
            self._socket.close(linger=0)

    def _serve(self) -> None:
        encoder = msgspec.msgpack.Encoder()
        try:
            while not self._stop.is_set():
                if not self._socket.poll(_POLL_MS):
                    continue
                identity, payload = self._receive()
                if payload is None:
                    answer: Reply = self._reject("a request is exactly one frame (use a DEALER socket)")
                else:
                    answer = self.answer(payload)
                try:
                    reply = encoder.encode(answer)
                except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
                    reply = encoder.encode(self._fail(f"reply could not be encoded: {exc}"))
                try:
                    # ROUTER drops a reply to a peer that left or is not reading; never blocks.
                    self._socket.send_multipart([identity, reply], flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass  # that peer's queue is full: it will time out and retry
        except zmq.ZMQError as exc:
            if exc.errno != zmq.ETERM:  # ETERM: the context is going away at process exit
                logger.error("mcinspect: request server stopped: %s", exc)
        finally:
            self._socket.close(linger=0)

    def _receive(self) -> tuple[bytes, bytes | None]:
        """One request as (identity, payload); payload None when it was not exactly one frame."""
        identity = self._socket.recv()
        payload = self._socket.recv() if self._socket.getsockopt(zmq.RCVMORE) else None
        extra = False
        while self._socket.getsockopt(zmq.RCVMORE):
            self._socket.recv()  # drained one by one: a many-frame message is never held whole
            extra = True
        return identity, None if extra else payload

    def answer(self, payload: bytes) -> Reply:
        """The reply to one raw request payload (never raises)."""
        if len(payload) > MAX_REQUEST_BYTES:
            return self._reject(f"request of {len(payload)} bytes exceeds the limit of {MAX_REQUEST_BYTES}")
        try:
            request = self._decoder.decode(payload)
        except msgspec.DecodeError as exc:
            return self._reject(self._decode_failure(payload, exc))
        if request.schema_version != SCHEMA_VERSION:
            return self._reject(_version_reason(request.schema_version))
        if self._token and not hmac.compare_digest(request.token.encode(), self._token):
            return self._reject("bad or missing token")
        try:
            return self._dispatch(request)
        except Exception as exc:  # noqa: BLE001 - the engine keeps serving whatever mcinspect gets wrong
            logger.exception("mcinspect: answering %s failed", type(request).__name__)
            return self._fail(f"{type(request).__name__} failed inside mcinspect: {exc}")

    def _dispatch(self, request: Request) -> Reply:
        handler = self._handlers.get(type(request))
        if handler is not None:
            return handler(request)
        if isinstance(request, Hello):
            return self.info
        if isinstance(request, GetSnapshot):
            return self._snapshot()
        if isinstance(request, GetHistory):
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
        assert isinstance(request, GetStats)  # the decoder yields no other type
        return self._stats()

    def _decode_failure(self, payload: bytes, exc: msgspec.DecodeError) -> str:
        try:
            version = self._probe.decode(payload).schema_version
        except msgspec.DecodeError:
            return f"malformed request: {exc}"
        if version != SCHEMA_VERSION:
            return _version_reason(version)
        return f"malformed request: {exc}"

    def _reject(self, reason: str) -> ErrorReply:
        self.rejected += 1
        return ErrorReply(schema_version=SCHEMA_VERSION, reason=reason)

    def _fail(self, reason: str) -> ErrorReply:
        self.errors += 1
        return ErrorReply(schema_version=SCHEMA_VERSION, reason=reason)


def _version_reason(version: int) -> str:
    return f"schema version {version} not supported; this engine speaks {SCHEMA_VERSION}"
