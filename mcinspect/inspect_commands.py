"""What `mcinspect snapshot` and `mcinspect info` do, apart from parsing arguments."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from .client import EngineRefused, request
from .ranks import Rank, discover, pick
from .schema import SCHEMA_VERSION, EngineInfo, GetSnapshot, GetStats, Snapshot, Stats
from .target import Target


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
    """A rank as `mcinspect info` shows it: where it is, what it said, its counters."""

    rank: Rank
    stats: Stats

    @property
    def info(self) -> EngineInfo:
        return self.rank.info


def rank_infos(targets: Sequence[Target], token: str, timeout_s: float) -> list[RankInfo]:
    """Every rank of the engine (ranks.discover) with its counters."""
    found = []
    for rank in discover(targets, token, timeout_s):
        stats = request(rank.target, GetStats(schema_version=SCHEMA_VERSION, token=token), timeout_s)
        if not isinstance(stats, Stats):
            raise EngineRefused(f"{rank.label} answered GetStats with {type(stats).__name__}")
        found.append(RankInfo(rank, stats))
    return found


def rank_target(targets: Sequence[Target], rank: int, token: str, timeout_s: float) -> Target:
    """Where `--rank N` of a live engine listens: rank 0 of one host is the target itself;
    otherwise the ranks are discovered (ranks.discover), so a rank that does not answer is named."""
    if rank == 0 and len(targets) == 1:
        return targets[0]
    return pick(discover(targets, token, timeout_s), rank).target
