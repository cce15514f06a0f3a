"""Plugin configuration from the environment, and the port each scheduler process binds."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass

from mcinspect.auth import curve_available, is_loopback

from .live_cadence import DEFAULT_BUDGET

PORT_ENV = "MCINSPECT_PORT"
HOST_ENV = "MCINSPECT_HOST"
TOKEN_ENV = "MCINSPECT_TOKEN"
CAPTURE_ENV = "MCINSPECT_CAPTURE"
CAPTURE_MODES = ("on-demand", "every-step")
"""on-demand: capture at a step boundary only while a client is subscribed to the stream (or a
snapshot is asked for), every step if one asked for it, else as the live budget allows;
every-step: always (what --self-check and --verify default to)."""
LIVE_BUDGET_ENV = "MCINSPECT_LIVE_BUDGET"
"""Share of the scheduler thread's time the inspector may use for live clients (live_cadence.py)."""
LOOPBACK = "127.0.0.1"
PORTS_PER_PROCESS = 2
"""Each scheduler process binds a request port and, next to it, a stream port."""


class ConfigError(Exception):
    """The environment asks for something unsafe or malformed."""


@dataclass(frozen=True)
class HooksConfig:
    """Where the hooks of this engine listen."""

    base_port: int
    host: str = LOOPBACK
    token: str = ""
    capture: str = ""
    """One of CAPTURE_MODES, or "" for the default (see Inspector)."""
    live_budget: float = DEFAULT_BUDGET

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> HooksConfig | None:
        """None when MCINSPECT_PORT is unset: the plugin then registers nothing."""
        raw_port = environ.get(PORT_ENV)
        if not raw_port:
            return None
        try:
            port = int(raw_port)
        except ValueError:
            raise ConfigError(f"{PORT_ENV}={raw_port!r} is not a port number") from None
        host = environ.get(HOST_ENV, LOOPBACK).strip("[]")
        token = environ.get(TOKEN_ENV, "")
        _check_host(host, token)
        capture = environ.get(CAPTURE_ENV, "")
        if capture and capture not in CAPTURE_MODES:
            raise ConfigError(f"{CAPTURE_ENV}={capture!r}: choose one of {', '.join(CAPTURE_MODES)}")
        raw_budget = environ.get(LIVE_BUDGET_ENV, str(DEFAULT_BUDGET))
        try:
            live_budget = float(raw_budget)
        except ValueError:
            live_budget = -1.0
        if not 0 < live_budget <= 1:
            raise ConfigError(f"{LIVE_BUDGET_ENV}={raw_budget!r}: give a share of time in (0, 1], e.g. 0.01")
        return cls(base_port=port, host=host, token=token, capture=capture, live_budget=live_budget)

    def request_port(self, *, tp_rank: int, tp_size: int, pp_rank: int, pp_size: int, dp_rank: int) -> int:
        """base + 2 * (global rank); global rank = (dp_rank * pp_size + pp_rank) * tp_size + tp_rank."""
        rank = (dp_rank * pp_size + pp_rank) * tp_size + tp_rank
        return self.base_port + PORTS_PER_PROCESS * rank


def _check_host(host: str, token: str) -> None:
    """An address ZMQ can bind (an IP literal or localhost; IPv6 without brackets is fine), and
    beyond loopback only with a token and CURVE to keep the stream private."""
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{HOST_ENV}={host!r} is not an IP address (e.g. 127.0.0.1, ::1, 0.0.0.0)") from None
    if is_loopback(host):
        return
    if not token:
        raise ConfigError(f"{HOST_ENV}={host} binds beyond loopback; set {TOKEN_ENV} as well")
    if not curve_available():
        raise ConfigError(f"{HOST_ENV}={host} needs ZMQ CURVE to keep the stream private, and this libzmq lacks it")
