"""Parse `PORT` / `HOST:PORT` command-line targets."""

from __future__ import annotations

from dataclasses import dataclass


class TargetError(ValueError):
    """A target that is not PORT or HOST:PORT."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Target:
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
        return f"tcp://{self.host}:{self.port}"
