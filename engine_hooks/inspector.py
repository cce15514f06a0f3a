"""Everything mcinspect keeps in one scheduler process: stats and the request server."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mcinspect.schema import SCHEMA_VERSION, EngineInfo

from .config import HooksConfig
from .guard import ErrorCounter
from .server import RequestServer
from .stats import StatsCollector


@dataclass
class Inspector:
    port: int
    stats: StatsCollector
    server: RequestServer

    @classmethod
    def start(cls, scheduler: Any, config: HooksConfig, errors: ErrorCounter) -> Inspector:
        from sglang.srt.runtime_context import get_parallel

        parallel = get_parallel()
        port = config.request_port(
            tp_rank=parallel.tp_rank,
            tp_size=parallel.tp_size,
            pp_rank=parallel.pp_rank,
            pp_size=parallel.pp_size,
            dp_rank=parallel.dp_rank or 0,
        )
        info = engine_info(scheduler, port, tp_rank=parallel.tp_rank, dp_rank=parallel.dp_rank or 0)
        stats = StatsCollector(mamba_pool_size=info.mamba_pool_size)
        server = RequestServer(config.host, port, config.token, info, lambda: stats.snapshot(errors.total))
        server.start()
        return cls(port=port, stats=stats, server=server)


def engine_info(scheduler: Any, port: int, *, tp_rank: int, dp_rank: int) -> EngineInfo:
    """The engine's configuration as this scheduler process sees it."""
    import sglang

    args = scheduler.server_args
    pool = scheduler.req_to_token_pool
    mamba_pool = getattr(pool, "mamba_pool", None)
    tree_core = getattr(scheduler.tree_cache, "tree_core", None)
    return EngineInfo(
        schema_version=SCHEMA_VERSION,
        sglang_version=sglang.__version__,
        model_path=str(args.model_path),
        strategy=str(args.mamba_radix_cache_strategy),
        page_size=int(scheduler.page_size),
        overlap=bool(scheduler.enable_overlap),
        tree_core=type(tree_core).__name__ if tree_core is not None else type(scheduler.tree_cache).__name__,
        mamba_pool_size=int(mamba_pool.size) if mamba_pool is not None else 0,
        kv_pool_tokens=int(scheduler.max_total_num_tokens),
        tp_rank=tp_rank,
        dp_rank=dp_rank,
        pid=os.getpid(),
        request_port=port,
    )
