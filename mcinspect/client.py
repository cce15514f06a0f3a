"""Request/reply with one scheduler process's request socket (ZMQ DEALER, bounded waits).

What comes back is untrusted (another process may answer on the port): replies are bounded in
size (`untrusted.max_message_bytes`, ZMQ cuts a bigger one off), only snapshots and histories may be big,
decoding failures of any kind are EngineRefused, and a reason is shown on one short line.
"""

from __future__ import annotations

import msgspec
import zmq

from .auth import missing_key_hint, secure_client, server_key_for
from .errors import McinspectError, one_line
from .schema import SCHEMA_VERSION, ErrorReply, Reply, Request, decode_reply
from .target import Target, allow_ipv6
from .untrusted import DECODE_FAILURES, max_message_bytes

MAX_SMALL_REPLY_BYTES = 1 << 20
"""Replies other than snapshots and histories are a few KB: larger is not a real engine."""
_BIG_REPLIES = (b"Snapshot", b"History")


class EngineUnreachable(McinspectError):
    """No reply within the timeout: nothing listens there, or the engine is stuck."""


class EngineRefused(McinspectError):
    """The engine answered with an ErrorReply, an unreadable reply, or another schema version."""


def client_socket(context: zmq.Context, kind: int, host: str, port: int, token: str) -> zmq.Socket:
    """A socket to host:port with the bounds and the CURVE key every client socket has."""
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.MAXMSGSIZE, max_message_bytes())
    allow_ipv6(socket, host)
    secure_client(socket, server_key_for(host, port, token))
    return socket


class Requester:
    """A DEALER socket to one request socket, with one request in flight at a time.

    DEALER rather than REQ: a lost reply does not wedge the socket. After a timeout call
    `reset()`, so that a late reply is never taken for the answer to the next request.
    The socket is not thread-safe: use a Requester from one thread only.
    """

    def __init__(self, target: Target, context: zmq.Context | None = None, token: str = "") -> None:
        """`token`: the engine's MCINSPECT_TOKEN, if it has one (it keys CURVE, mcinspect/auth.py)."""
        self.target = target
        self._token = token
        self._context = context or zmq.Context.instance()
        self._encoder = msgspec.msgpack.Encoder()
        self.socket = self._open()
        """Readable when a reply is waiting (register it with a `zmq.Poller`)."""

    def _open(self) -> zmq.Socket:
        socket = client_socket(self._context, zmq.DEALER, self.target.host, self.target.port, self._token)
        socket.connect(self.target.address)
        return socket

    def send(self, message: Request) -> None:
        """Queue one request; raises EngineUnreachable if even the local queue is full."""
        try:
            self.socket.send(self._encoder.encode(message), flags=zmq.NOBLOCK)
        except zmq.Again:
            raise EngineUnreachable(f"cannot send to {self.target.host}:{self.target.port}: its queue is full") from None

    def receive(self) -> Reply:
        """Read and check the waiting reply (call when `socket` is readable); read in place, not
        copied out of ZMQ's buffer (a snapshot, or a hostile reply, can be hundreds of MB)."""
        return check_reply(self.target, self.socket.recv(copy=False).buffer)

    def reset(self) -> None:
        """Drop the socket (and any late reply on it) and open a fresh one."""
        self.socket.close(linger=0)
        self.socket = self._open()

    def close(self) -> None:
        """Close the socket."""
        self.socket.close(linger=0)


def unreachable_reason(target: Target, timeout_s: float, token: str = "") -> str:
    """The one-line reason shown when an engine does not answer."""
    hint = missing_key_hint(target.host, target.port, token)
    return f"no answer from {target.host}:{target.port} within {timeout_s:g} s; is the engine running with MCINSPECT_PORT?{hint}"


class _TypeProbe(msgspec.Struct):
    type: str = ""


_probe = msgspec.msgpack.Decoder(_TypeProbe)


def check_reply(target: Target, payload: bytes | memoryview) -> Reply:
    """Decode a reply; an ErrorReply, an unreadable or oversized payload, or another schema
    raise EngineRefused (the reason on one line)."""
    where = f"{target.host}:{target.port}"
    try:
        if len(payload) > MAX_SMALL_REPLY_BYTES and _probe.decode(payload).type.encode() not in _BIG_REPLIES:
            raise EngineRefused(f"{where} sent a {len(payload):,}-byte reply that is no snapshot: not an mcinspect engine?")
        reply = decode_reply(payload)
    except RecursionError:
        raise EngineRefused(f"unreadable reply from {where}: nested too deeply to decode") from None
    except DECODE_FAILURES as exc:
        raise EngineRefused(f"unreadable reply from {where} (another mcinspect version?): {one_line(exc)}") from None
    if isinstance(reply, ErrorReply):
        raise EngineRefused(one_line(reply.reason))
    if reply.schema_version != SCHEMA_VERSION:
        raise EngineRefused(f"engine speaks schema {reply.schema_version}, this client {SCHEMA_VERSION}")
    return reply


def request(target: Target, message: Request, timeout_s: float = 5.0) -> Reply:
    """Send one request and return the reply; raise instead of hanging."""
    token = getattr(message, "token", "")
    requester = Requester(target, token=token)
    try:
        requester.send(message)
        if not requester.socket.poll(int(timeout_s * 1000)):
            raise EngineUnreachable(unreachable_reason(target, timeout_s, token))
        return requester.receive()
    finally:
        requester.close()
