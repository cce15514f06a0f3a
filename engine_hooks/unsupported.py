"""The inspector port of an engine whose sglang release mcinspect does not read: it answers
`Hello` with an EngineInfo whose `unsupported` says why (so `mcinspect info` prints that line)
and every other request with the same reason. Nothing of the engine is read or hooked."""

from __future__ import annotations

import os
from typing import Any

from mcinspect.schema import SCHEMA_VERSION, EngineInfo, ErrorReply, GetHistory, GetSnapshot, GetStats

from .config import HooksConfig
from .placement import Placement, placement_fields
from .server import RequestServer


class UnsupportedInspector:
    def __init__(self, scheduler: Any, config: HooksConfig, reason: str) -> None:
        import sglang

        placement = Placement.of_scheduler(scheduler)
        self.port = config.request_port(placement.rank)
        info = EngineInfo(
            schema_version=SCHEMA_VERSION,
            sglang_version=str(sglang.__version__),
            model_path=str(getattr(getattr(scheduler, "server_args", None), "model_path", "")),
            strategy="",
            page_size=int(getattr(scheduler, "page_size", 0) or 0),
            overlap=bool(getattr(scheduler, "enable_overlap", False)),
            tree_core=type(getattr(scheduler, "tree_cache", None)).__name__,
            full_tree_detail=False,
            mamba_pool_size=0,
            kv_pool_tokens=0,
            tp_rank=placement.tp_rank,
            dp_rank=placement.dp_rank,
            pid=os.getpid(),
            request_port=self.port,
            stream_port=0,
            unsupported=reason,
            **placement_fields(placement),
        )
        refuse = ErrorReply(schema_version=SCHEMA_VERSION, reason=reason)
        self.server = RequestServer(
            config.host,
            self.port,
            token=config.token,
            info=info,
            snapshot=lambda: refuse,  # type: ignore[arg-type,return-value]
            history=lambda seq: None,
            stats=lambda: refuse,  # type: ignore[arg-type,return-value]
            handlers={GetSnapshot: lambda r: refuse, GetHistory: lambda r: refuse, GetStats: lambda r: refuse},
        )
        self.server.start()

    def on_step(self, scheduler: Any, batch: Any) -> None:
        """Nothing to capture."""

    def on_idle(self, scheduler: Any) -> None:
        """Nothing to capture."""
