"""What `mcinspect snapshot` and `mcinspect info` do, apart from parsing arguments."""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass

import msgspec

from .client import EngineRefused, EngineUnreachable, request
from .schema import SCHEMA_VERSION, EngineInfo, GetSnapshot, GetStats, Hello, Snapshot, Stats
from .target import Target

PORT_STRIDE = 2
"""Scheduler process r listens on base + 2 * r (see engine_hooks/config.py)."""
MAX_RANKS = 64


def fetch_snapshot(target: Target, token: str, timeout_s: float) -> Snapshot:
    reply = request(target, GetSnapshot(schema_version=SCHEMA_VERSION, token=token), timeout_s)
    if not isinstance(reply, Snapshot):
        raise EngineRefused(f"expected a Snapshot from {target.host}:{target.port}, got {type(reply).__name__}")
    return reply


def write_json(data: msgspec.Struct, output: str) -> None:
    """Write `data` as JSON to `output` ('-' for stdout); a file appears whole or not at all."""
    write_bytes(msgspec.json.encode(data) + b"\n", output)


def write_bytes(payload: bytes, output: str) -> None:
    """Write to `output` ('-' for stdout) through a temporary file and a rename."""
    if output == "-":
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(output))
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".mcinspect-", delete=False) as tmp:
        tmp.write(payload)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp.name, 0o666 & ~umask)  # as a plain open() would have made it, not 0600
    os.replace(tmp.name, output)


@dataclass(frozen=True)
class RankInfo:
    info: EngineInfo
    stats: Stats


def discover_ranks(target: Target, token: str, timeout_s: float) -> list[RankInfo]:
    """The process at `target`, then base + 2, base + 4, ... until one does not answer."""
    ranks = []
    for rank in range(MAX_RANKS):
        port = target.port + PORT_STRIDE * rank
        if port > 65535:
            break
        here = Target(target.host, port)
        try:
            info = request(here, Hello(schema_version=SCHEMA_VERSION, token=token), timeout_s if rank == 0 else min(timeout_s, 0.5))
        except EngineUnreachable:
            if rank == 0:
                raise
            break
        if isinstance(info, EngineInfo) and info.unsupported:
            raise EngineRefused(f"{here.host}:{here.port}: {info.unsupported}")
        stats = request(here, GetStats(schema_version=SCHEMA_VERSION, token=token), timeout_s)
        if not isinstance(info, EngineInfo) or not isinstance(stats, Stats):
            raise EngineRefused(f"{here.host}:{here.port} answered Hello/GetStats with {type(info).__name__}/{type(stats).__name__}")
        ranks.append(RankInfo(info, stats))
    return ranks
