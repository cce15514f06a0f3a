"""Every scheduler process (rank) of one engine, found from its base port.

Rank r's hooks listen on PORT + 2 * r of the host that runs it (engine_hooks/placement.py).
Rank 0 answers Hello with the engine's `world_size`; each other rank is looked for at
PORT + 2 * r on every host given (an engine over several nodes: `h1:7777,h2:7777`), all at once,
and must say it is rank r of as many. A rank that answers nowhere is an error naming it: a view
of some ranks only would hide the one that diverged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zmq

from .auth import is_loopback, missing_key_hint
from .client import EngineRefused, EngineUnreachable, Requester, request
from .errors import McinspectError
from .rank_files import RankChoiceError, ranks_text
from .schema import SCHEMA_VERSION, EngineInfo, Hello, Reply
from .target import Target

PORT_STRIDE = 2
"""Rank r listens on PORT + 2 * r (a request port and the stream port after it)."""
LEGACY_MAX_RANKS = 64
"""An engine from before `world_size`: ranks probed one by one until one does not answer."""
MULTI_NODE_HINT = "ranks on other hosts: list each node's HOST:PORT with the engine's base port, rank 0's first, e.g. h1:7777,h2:7777"


class RankMissing(EngineUnreachable):
    """A rank of the engine answers at none of the addresses it may have."""


@dataclass(frozen=True)
class Rank:
    """One scheduler process of the engine: its rank, where it listens, what it said."""

    rank: int
    target: Target
    info: EngineInfo

    @property
    def label(self) -> str:
        """`rank 1 (tp1/dp0) at 127.0.0.1:7779`."""
        return f"rank {self.rank} (tp{self.info.tp_rank}/dp{self.info.dp_rank}) at {self.target.host}:{self.target.port}"


def discover(targets: Sequence[Target], token: str = "", timeout_s: float = 5.0) -> list[Rank]:
    """The engine's ranks in rank order; `targets[0]` is rank 0's address, the others further
    hosts of the engine (their PORT the same base port). Raises EngineUnreachable (rank 0),
    RankMissing (another rank), EngineRefused (an unsupported release, or not rank 0)."""
    base = targets[0]
    first = _engine_info(base, request(base, Hello(schema_version=SCHEMA_VERSION, token=token), timeout_s))
    if first.rank != 0:
        raise EngineRefused(
            f"{base.host}:{base.port} is rank {first.rank} of the engine; give rank 0's port, the engine's MCINSPECT_PORT "
            f"({base.port - PORT_STRIDE * first.rank})"
        )
    if first.world_size == 0:  # an engine from before world_size
        return _probe_in_turn(base, first, token, timeout_s)
    wanted = {rank: _addresses(targets, rank) for rank in range(1, first.world_size)}
    replies = _hello_all([t for ts in wanted.values() for t in ts], token, timeout_s, done=lambda got: _all_found(wanted, got, first))
    ranks = [Rank(0, base, first)]
    for rank, addresses in wanted.items():
        found = next((t for t in addresses if _is_rank(replies.get(t), rank, first)), None)
        if found is None:
            raise RankMissing(_missing(rank, first, addresses, replies, targets, token, timeout_s))
        ranks.append(Rank(rank, found, replies[found]))  # type: ignore[arg-type]
    return ranks


def pick(ranks: Sequence[Rank], rank: int) -> Rank:
    """`--rank N` of a live engine."""
    if not 0 <= rank < len(ranks):
        raise RankChoiceError(f"--rank {rank}: the engine has {ranks_text(len(ranks))}")
    return ranks[rank]


def _engine_info(target: Target, reply: Reply) -> EngineInfo:
    if not isinstance(reply, EngineInfo):
        raise EngineRefused(f"{target.host}:{target.port} answered Hello with {type(reply).__name__}")
    if reply.unsupported:
        raise EngineRefused(f"{target.host}:{target.port}: {reply.unsupported}")
    return reply


def _addresses(targets: Sequence[Target], rank: int) -> list[Target]:
    """Where rank `rank` may listen: its port on each host given."""
    return [Target(t.host, t.port + PORT_STRIDE * rank) for t in targets if t.port + PORT_STRIDE * rank <= 65535]


def _is_rank(reply: object, rank: int, first: EngineInfo) -> bool:
    """The answer is rank `rank` of the same engine as rank 0 (another engine's rank at that
    port on another host would not be)."""
    return isinstance(reply, EngineInfo) and not reply.unsupported and reply.rank == rank and reply.world_size == first.world_size


def _all_found(wanted: dict[int, list[Target]], got: dict[Target, Reply | McinspectError], first: EngineInfo) -> bool:
    return all(any(_is_rank(got.get(t), rank, first) for t in addresses) for rank, addresses in wanted.items())


def _hello_all(
    targets: list[Target], token: str, timeout_s: float, done: Callable[[dict[Target, Reply | McinspectError]], bool]
) -> dict[Target, Reply | McinspectError]:
    """Hello to every target at once; their answers (or why one was unreadable) within
    `timeout_s`, or sooner once `done(answers)` holds."""
    answers: dict[Target, Reply | McinspectError] = {}
    poller = zmq.Poller()
    open_: dict[zmq.Socket, Requester] = {}
    try:
        for target in targets:
            requester = Requester(target, token=token)
            open_[requester.socket] = requester
            requester.send(Hello(schema_version=SCHEMA_VERSION, token=token))
            poller.register(requester.socket, zmq.POLLIN)
        deadline = time.monotonic() + timeout_s
        while len(answers) < len(targets) and not done(answers):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for socket, _ in poller.poll(int(left * 1000) + 1):
                requester = open_[socket]
                poller.unregister(socket)
                try:
                    answers[requester.target] = requester.receive()
                except McinspectError as exc:
                    answers[requester.target] = exc
    finally:
        for requester in open_.values():
            requester.close()
    return answers


def _missing(
    rank: int,
    first: EngineInfo,
    addresses: list[Target],
    replies: dict[Target, Reply | McinspectError],
    targets: Sequence[Target],
    token: str,
    timeout_s: float,
) -> str:
    where = ", ".join(f"{t.host}:{t.port}" for t in addresses)
    heard = [f"{t.host}:{t.port} {_heard(replies[t])}" for t in addresses if t in replies]
    # Off loopback a missing token is the likely cause; on loopback a rank's key file goes with
    # its process, so its absence says nothing rank 0's presence did not.
    remote = [t for t in addresses if not is_loopback(t.host)]
    hint = missing_key_hint(remote[0].host, remote[0].port, token) if remote else ""
    more = f"; {MULTI_NODE_HINT}" if len(targets) == 1 else ""
    return (
        f"rank {rank} of {first.world_size} (tp{rank % max(first.tp_size, 1)}) answers at none of {where} within {timeout_s:g} s"
        + (f" ({'; '.join(heard)})" if heard else "")
        + f"{hint}{more}"
    )


def _heard(reply: Reply | McinspectError) -> str:
    if isinstance(reply, McinspectError):
        return f"answered unreadably: {reply}"
    if isinstance(reply, EngineInfo):
        return f"is rank {reply.rank} of {reply.world_size} (another engine?)"
    return f"answered {type(reply).__name__}"


def _probe_in_turn(base: Target, first: EngineInfo, token: str, timeout_s: float) -> list[Rank]:
    """Ranks at base + 2, base + 4, ... until one does not answer (engines that do not say how
    many ranks they have)."""
    ranks = [Rank(0, base, first)]
    for rank in range(1, LEGACY_MAX_RANKS):
        here = Target(base.host, base.port + PORT_STRIDE * rank)
        if here.port > 65535:
            break
        try:
            reply = request(here, Hello(schema_version=SCHEMA_VERSION, token=token), min(timeout_s, 0.5))
        except EngineUnreachable:
            break
        ranks.append(Rank(rank, here, _engine_info(here, reply)))
    return ranks
