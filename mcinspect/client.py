"""Request/reply with one scheduler process's request socket (ZMQ DEALER, bounded waits)."""

from __future__ import annotations

import msgspec
import zmq

from .schema import SCHEMA_VERSION, ErrorReply, Reply, Request, decode_reply
from .target import Target


class EngineUnreachable(Exception):
    """No reply within the timeout: nothing listens there, or the engine is stuck."""


class EngineRefused(Exception):
    """The engine answered with an ErrorReply, an unreadable reply, or another schema version."""


class Requester:
    """A DEALER socket to one request socket, with one request in flight at a time.

    DEALER rather than REQ: a lost reply does not wedge the socket. After a timeout call
    `reset()`, so that a late reply is never taken for the answer to the next request.
    The socket is not thread-safe: use a Requester from one thread only.
    """

    def __init__(self, target: Target, context: zmq.Context | None = None) -> None:
        self.target = target
        self._context = context or zmq.Context.instance()
        self._encoder = msgspec.msgpack.Encoder()
        self.socket = self._open()
        """Readable when a reply is waiting (register it with a `zmq.Poller`)."""

    def _open(self) -> zmq.Socket:
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.target.address)
        return socket

    def send(self, message: Request) -> None:
        """Queue one request; raises EngineUnreachable if even the local queue is full."""
        try:
            self.socket.send(self._encoder.encode(message), flags=zmq.NOBLOCK)
        except zmq.Again:
            raise EngineUnreachable(f"cannot send to {self.target.host}:{self.target.port}: its queue is full") from None

    def receive(self) -> Reply:
        """Read and check the waiting reply (call when `socket` is readable)."""
        return check_reply(self.target, self.socket.recv())

    def reset(self) -> None:
        """Drop the socket (and any late reply on it) and open a fresh one."""
        self.socket.close(linger=0)
        self.socket = self._open()

    def close(self) -> None:
        """Close the socket."""
        self.socket.close(linger=0)


def unreachable_reason(target: Target, timeout_s: float) -> str:
    """The one-line reason shown when an engine does not answer."""
    return f"no answer from {target.host}:{target.port} within {timeout_s:g} s; is the engine running with MCINSPECT_PORT?"


def check_reply(target: Target, payload: bytes) -> Reply:
    """Decode a reply; an ErrorReply, an unreadable payload or another schema raise EngineRefused."""
    try:
        reply = decode_reply(payload)
    except msgspec.DecodeError as exc:
        raise EngineRefused(f"unreadable reply from {target.host}:{target.port} (another mcinspect version?): {exc}") from None
    if isinstance(reply, ErrorReply):
        raise EngineRefused(reply.reason)
    if reply.schema_version != SCHEMA_VERSION:
        raise EngineRefused(f"engine speaks schema {reply.schema_version}, this client {SCHEMA_VERSION}")
    return reply


def request(target: Target, message: Request, timeout_s: float = 5.0) -> Reply:
    """Send one request and return the reply; raise instead of hanging."""
    requester = Requester(target)
    try:
        requester.send(message)
        if not requester.socket.poll(int(timeout_s * 1000)):
            raise EngineUnreachable(unreachable_reason(target, timeout_s))
        return requester.receive()
    finally:
        requester.close()
