"""Where one scheduler process sits among the engine's scheduler processes, and so its rank:
the number that picks its inspector ports (PORT + 2 * rank) and that clients discover.

rank = (replica * pp_size + pp_rank) * tp_size + tp_rank, over world_size = replicas * pp_size *
tp_size processes. A replica is a data-parallel copy of the model (`--dp-size`). Attention data
parallelism (`--attn-dp-size`) splits one TP group into attention groups that each schedule their
own requests: sglang then hands each scheduler its attention group as `dp_rank`, and its processes
are already numbered by `tp_rank`, so the replica is `dp_rank // attn_dp_size`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Placement:
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    dp_rank: int = 0
    """sglang's: the replica, or under attention DP the attention group (counted over replicas)."""
    replicas: int = 1
    attn_dp_size: int = 1

    @property
    def replica(self) -> int:
        return self.dp_rank // self.attn_dp_size

    @property
    def rank(self) -> int:
        return (self.replica * self.pp_size + self.pp_rank) * self.tp_size + self.tp_rank

    @property
    def world_size(self) -> int:
        return self.replicas * self.pp_size * self.tp_size

    @classmethod
    def of_scheduler(cls, scheduler: Any) -> Placement:
        """The scheduler process's placement: sglang's parallel context where the release has
        one (0.5.14 on), else the scheduler's own ParallelState (`scheduler.ps`, 0.5.13) or its
        own attributes (0.5.10-0.5.12, and what an unsupported release has)."""
        try:
            from sglang.srt.runtime_context import get_parallel

            return cls._of(get_parallel(), replicas_of=get_parallel())
        except (ImportError, ValueError, RuntimeError):  # no such context, or not published in this process
            own = getattr(scheduler, "ps", scheduler)  # without it, 0.5.13's ranks all read rank 0
            return cls._of(own, replicas_of=getattr(scheduler, "server_args", None))

    @classmethod
    def _of(cls, source: Any, replicas_of: Any) -> Placement:
        return cls(
            tp_rank=_int(getattr(source, "tp_rank", 0), 0),
            tp_size=_int(getattr(source, "tp_size", 1), 1),
            pp_rank=_int(getattr(source, "pp_rank", 0), 0),
            pp_size=_int(getattr(source, "pp_size", 1), 1),
            dp_rank=_int(getattr(source, "dp_rank", 0), 0),
            replicas=_int(getattr(replicas_of, "dp_size", 1), 1),
            attn_dp_size=_int(getattr(source, "attn_dp_size", 1), 1),
        )


def _int(value: Any, default: int) -> int:
    """sglang leaves some of these None (no DP controller: dp_rank)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def placement_fields(placement: Placement) -> dict[str, int]:
    """EngineInfo's fields that say where the process sits (besides tp_rank and dp_rank)."""
    return dict(
        rank=placement.rank,
        world_size=placement.world_size,
        tp_size=placement.tp_size,
        pp_rank=placement.pp_rank,
        attn_dp_size=placement.attn_dp_size,
    )
