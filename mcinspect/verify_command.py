"""What `mcinspect verify` does, apart from parsing arguments: ask a live engine to recompute
chosen (or all) cached states through its own forward pass and judge each against its oracle's
tolerance (mcinspect.checks.recompute)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .checks.recompute import beyond, tolerances
from .errors import McinspectError
from .schema import SCHEMA_VERSION, EngineInfo, GetVerify, Hello, NodeId, NodeVerdict, StartVerify, VerifyStatus
from .target import Target

POLL_S = 0.2


class VerifyError(McinspectError):
    """The verification cannot be asked for (the message says why)."""


@dataclass(frozen=True)
class Judged:
    verdict: NodeVerdict
    tolerance: dict[str, float]
    """Per component; empty when not verified."""
    equal: bool | None
    """None: not verified (`verdict.error` says why)."""


def judge(verdict: NodeVerdict) -> Judged:
    """A verdict against its oracle's tolerance for the forward that wrote the state."""
    if verdict.error:
        return Judged(verdict, {}, None)
    equal = beyond(verdict.oracle, verdict.forward, verdict.conv_rel_l2, verdict.temporal_rel_l2) is None  # NaN is not equal
    return Judged(verdict, tolerances(verdict.oracle, verdict.forward), equal)


def single_rank(targets: Sequence[Target], token: str, timeout_s: float) -> Target:
    """Where to ask: the engine's one rank. With several, every rank must run the reference
    forward at the same time (its collectives line up only then), which only the engine's own
    automatic verification arranges."""
    from .ranks import discover  # zmq: not for the replays that import this module

    ranks = discover(targets, token, timeout_s)
    if len(ranks) > 1:
        first = ranks[0].info
        raise VerifyError(
            f"verifying on request needs an engine of one rank; this one has {len(ranks)} (tp {first.tp_size}), whose references "
            "must run on every rank together: start it with MCINSPECT_VERIFY=engine (it then verifies every rank) and read T2 "
            f"with `mcinspect check {targets[0].host}:{targets[0].port}` or `mcinspect info`"
        )
    return ranks[0].target


def verify_nodes(
    target: Target,
    nodes: list[int],
    everything: bool,
    *,
    token: str,
    timeout_s: float,
    wait_s: float,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[Judged]:
    """Ask for the verification, poll until the engine is done, judge each node."""
    from .client import request  # zmq: not for the replays that import this module

    info = request(target, Hello(schema_version=SCHEMA_VERSION, token=token), timeout_s)
    if isinstance(info, EngineInfo) and info.mamba_pool_size == 0:
        raise VerifyError(f"the engine at {target.host}:{target.port} keeps no mamba state (not a hybrid SSM model)")
    ask = StartVerify(schema_version=SCHEMA_VERSION, nodes=[NodeId(n) for n in nodes], all=everything, token=token)
    status = _status(request(target, ask, timeout_s))
    deadline = time.monotonic() + wait_s
    while not status.done:
        if time.monotonic() > deadline:
            raise VerifyError(f"the engine verified {len(status.results)} of {status.total} states in {wait_s:g} s; raise --wait")
        time.sleep(POLL_S)
        status = _status(request(target, GetVerify(schema_version=SCHEMA_VERSION, ticket=status.ticket, token=token), timeout_s))
        on_progress(len(status.results), status.total)
    order = {node: i for i, node in enumerate(nodes)}  # as asked (--all: as the engine went)
    return [judge(v) for v in sorted(status.results, key=lambda v: order.get(v.node, len(order)))]


def _status(reply: object) -> VerifyStatus:
    from .client import EngineRefused

    if not isinstance(reply, VerifyStatus):
        raise EngineRefused(f"expected a VerifyStatus, got {type(reply).__name__}")
    return reply


def exit_code(judged: list[Judged], everything: bool = False) -> int:
    """2 when a node could not be verified (bad input), else 1 on a mismatch, else 0. Under
    `--all` a node the engine's load kept from its turn (evicted while it waited, no KV room) is
    skipped, unless that left nothing verified."""
    skipped = [j for j in judged if everything and j.verdict.skipped]
    if any(j.equal is None for j in judged if j not in skipped) or (skipped and len(skipped) == len(judged)):
        return 2
    return 1 if any(j.equal is False for j in judged) else 0
