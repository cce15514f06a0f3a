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
VERIFY_ENV = "MCINSPECT_VERIFY"
VERIFY_MODES = ("off", "engine", "transformers", "both")
"""engine: T2 through the engine's own forward pass (any model, any device); transformers: the
embedded CPU engine's independent implementation; both: each state by each oracle."""
VERIFY_SHARE_ENV = "MCINSPECT_VERIFY_SHARE"
DEFAULT_VERIFY_SHARE = 0.05
"""Reference prefills may take at most this share of the scheduler's time, idle turns included
(5%: a prefill of a cached prefix costs about what its first serving did, so verifying most new
states of a cache-heavy workload fits, and users lose at most ~5% throughput; an idle turn can
end with a request arriving, which then waits for the reference)."""
VERIFY_RATE_ENV = "MCINSPECT_VERIFY_RATE"
DEFAULT_VERIFY_RATE = 20.0
"""At most this many reference prefills a second, busy or idle."""
VERIFY_WORKING_ENV = "MCINSPECT_VERIFY_WORKING"
DEFAULT_VERIFY_WORKING = 0.25
"""Share of reference prefills spent on running requests' working states, when any runs."""
TRACK_WRITES_ENV = "MCINSPECT_TRACK_WRITES"
"""off: no hooks inside the forward (the write-ran / write-target checks then judge nothing);
for measuring what they cost, or an engine where they must not run."""
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
    verify: str = "off"
    """One of VERIFY_MODES."""
    verify_share: float = DEFAULT_VERIFY_SHARE
    verify_rate: float = DEFAULT_VERIFY_RATE
    verify_working: float = DEFAULT_VERIFY_WORKING
    track_writes: bool = True
    """Hooks inside the forward read the track writes it ran (write_hooks.py)."""

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
        live_budget = _share(environ, LIVE_BUDGET_ENV, DEFAULT_BUDGET)
        verify = environ.get(VERIFY_ENV, "off") or "off"
        if verify not in VERIFY_MODES:
            raise ConfigError(f"{VERIFY_ENV}={verify!r}: choose one of {', '.join(VERIFY_MODES)}")
        track_writes = environ.get(TRACK_WRITES_ENV, "on") or "on"
        if track_writes not in ("on", "off"):
            raise ConfigError(f"{TRACK_WRITES_ENV}={track_writes!r}: choose on or off")
        return cls(
            base_port=port,
            host=host,
            token=token,
            capture=capture,
            live_budget=live_budget,
            verify=verify,
            verify_share=_share(environ, VERIFY_SHARE_ENV, DEFAULT_VERIFY_SHARE),
            verify_rate=_positive(environ, VERIFY_RATE_ENV, DEFAULT_VERIFY_RATE),
            verify_working=_share(environ, VERIFY_WORKING_ENV, DEFAULT_VERIFY_WORKING, allow_zero=True),
            track_writes=track_writes == "on",
        )

    def request_port(self, rank: int) -> int:
        """base + 2 * rank, for the scheduler process of that rank (placement.py)."""
        return self.base_port + PORTS_PER_PROCESS * rank


def _number(environ: Mapping[str, str], name: str, default: float) -> tuple[float, str]:
    raw = environ.get(name, "") or str(default)
    try:
        return float(raw), raw
    except ValueError:
        return float("nan"), raw


def _share(environ: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    """A share of time from the environment, in (0, 1] ([0, 1] with `allow_zero`)."""
    value, raw = _number(environ, name, default)
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ConfigError(f"{name}={raw!r}: give a share of time in {interval}, e.g. {default:g}")
    return value


def _positive(environ: Mapping[str, str], name: str, default: float) -> float:
    value, raw = _number(environ, name, default)
    if not value > 0:
        raise ConfigError(f"{name}={raw!r}: give a positive number, e.g. {default:g}")
    return value


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
