"""The request socket of one scheduler process: a ZMQ ROUTER served on its own thread.

The scheduler never waits on it: replies are built from thread-safe snapshots. Malformed,
oversized or wrong-version requests get an ErrorReply and are counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import msgspec
import zmq

from mcinspect.schema import (
    MAX_REQUEST_BYTES,
    SCHEMA_VERSION,
    EngineInfo,
    ErrorReply,
    GetStats,
    Hello,
    Reply,
    Stats,
    encoder,
    request_decoder,
)

logger = logging.getLogger("mcinspect.engine_hooks")


class RequestServer:
    """Answers Hello with EngineInfo and GetStats with Stats."""

    def __init__(self, host: str, port: int, token: str, info: EngineInfo, stats: Callable[[], Stats]) -> None:
        self.info = info
        self.token = token
        self.stats = stats
        self.rejected = 0
        self._context = zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        self._socket.bind(f"tcp://{host}:{port}")  # raises if the port is taken: caller decides
        self._thread = threading.Thread(target=self._serve, name="mcinspect-requests", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                frames = self._socket.recv_multipart(copy=True)
            except zmq.ZMQError:
                return  # context terminated at process exit
            if len(frames) != 2:  # identity + one payload; anything else is not ours
                self.rejected += 1
                continue
            identity, payload = frames
            self._socket.send_multipart([identity, encoder.encode(self.answer(payload))])

    def answer(self, payload: bytes) -> Reply:
        """The reply to one raw request (never raises)."""
        try:
            request = request_decoder.decode(payload)
        except msgspec.DecodeError as exc:
            return self._reject(f"malformed request: {exc}")
        if request.schema_version != SCHEMA_VERSION:
            return self._reject(f"schema version {request.schema_version} not supported; this engine speaks {SCHEMA_VERSION}")
        if self.token and request.token != self.token:
            return self._reject("bad or missing token")
        if isinstance(request, Hello):
            return self.info
        if isinstance(request, GetStats):
            return self.stats()
        return self._reject(f"unsupported request {type(request).__name__}")

    def _reject(self, reason: str) -> ErrorReply:
        self.rejected += 1
        return ErrorReply(schema_version=SCHEMA_VERSION, reason=reason)
