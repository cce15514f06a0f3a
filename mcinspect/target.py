"""Parse `PORT` / `HOST:PORT` command-line targets (a comma-separated list for an engine on
several hosts), and the ZMQ address of a host and port."""

from __future__ import annotations

from dataclasses import dataclass

import zmq

from .errors import McinspectError


class TargetError(McinspectError, ValueError):
    """A target that is not PORT or HOST:PORT."""


def zmq_address(host: str, port: int) -> str:
    """tcp://host:port, with an IPv6 literal in brackets."""
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def allow_ipv6(socket: zmq.Socket, host: str) -> None:
    """ZMQ sockets are IPv4-only unless told otherwise: needed for an IPv6 `host`."""
    if ":" in host:
        socket.setsockopt(zmq.IPV6, 1)


@dataclass(frozen=True)
class Target:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Target:
        """`7777`, `host:7777`, `[::1]:7777` (a bare host defaults to 127.0.0.1)."""
        host, sep, port_text = text.rpartition(":")
        if not sep:
            host = "127.0.0.1"
        try:
            port = int(port_text)
        except ValueError:
            raise TargetError(f"target {text!r} is not PORT or HOST:PORT") from None
        if not 1 <= port <= 65535:
            raise TargetError(f"port {port} is out of range 1-65535")
        return cls(host=host.strip("[]") or "127.0.0.1", port=port)

    @property
    def address(self) -> str:
        return zmq_address(self.host, self.port)


def parse_targets(text: str) -> tuple[Target, ...]:
    """`7777`, `h1:7777,h2:7777`: one engine's hosts, the first the one of its rank 0 (duplicates dropped)."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise TargetError(f"targets {text!r}: give PORT, HOST:PORT, or HOST:PORT,HOST:PORT,... without empty entries")
    return tuple(dict.fromkeys(Target.parse(part) for part in parts))
