"""Request/reply with one scheduler process's request socket (ZMQ DEALER, bounded waits)."""

from __future__ import annotations

import msgspec
import zmq

from .schema import SCHEMA_VERSION, ErrorReply, Reply, Request, encoder, reply_decoder
from .target import Target


class EngineUnreachable(Exception):
    """No reply within the timeout: nothing listens there, or the engine is stuck."""


class EngineRefused(Exception):
    """The engine answered with an ErrorReply."""


def request(target: Target, message: Request, timeout_s: float = 5.0) -> Reply:
    """Send one request and return the reply; raise instead of hanging."""
    context = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(target.address)
        socket.send(encoder.encode(message))
        if not socket.poll(int(timeout_s * 1000)):
            raise EngineUnreachable(f"no answer from {target.host}:{target.port} within {timeout_s:g} s; is the engine running with MCINSPECT_PORT?")
        payload = socket.recv()
    finally:
        socket.close()
    try:
        reply = reply_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        raise EngineRefused(f"unreadable reply from {target.host}:{target.port}: {exc}") from None
    if isinstance(reply, ErrorReply):
        raise EngineRefused(reply.reason)
    if reply.schema_version != SCHEMA_VERSION:
        raise EngineRefused(f"engine speaks schema {reply.schema_version}, this client {SCHEMA_VERSION}")
    return reply
