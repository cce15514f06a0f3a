"""sglang general plugin (entry point group `sglang.srt.plugins`, name `mcinspect`).

sglang calls `register()` at the top of every engine process. It does nothing unless
MCINSPECT_PORT is set. Hooks go through sglang's HookRegistry; each body is guarded so an
error in mcinspect is counted and logged, never raised into the scheduler.

| sglang method (0.5.23)                                   | hook  | what mcinspect does           |
|----------------------------------------------------------|-------|-------------------------------|
| managers.scheduler.Scheduler.__init__                    | AFTER | bind the request port, start  |
| managers.scheduler.Scheduler.process_batch_result        | AFTER | step boundary: read the pools |
| mem_cache.unified_radix_cache.UnifiedRadixCache.evict    | AFTER | count evicted slots / tokens  |
| mem_cache.unified_radix_cache.UnifiedRadixCache.evict_for_alloc | AFTER | same                 |
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .config import ConfigError, HooksConfig
from .guard import ErrorCounter
from .inspector import Inspector

logger = logging.getLogger("mcinspect.engine_hooks")

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
TREE = "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache"

errors = ErrorCounter()
inspector: Inspector | None = None
"""This process's inspector, once its scheduler exists."""


def register() -> None:
    """Entry point: register the hooks if MCINSPECT_PORT asks for them."""
    try:
        config = HooksConfig.from_env()
    except ConfigError as exc:
        logger.error("mcinspect disabled: %s", exc)
        return
    if config is None:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(f"{SCHEDULER}.__init__", _start(config), HookType.AFTER)
    HookRegistry.register(f"{SCHEDULER}.process_batch_result", _after_step, HookType.AFTER)
    HookRegistry.register(f"{TREE}.evict", _after_evict, HookType.AFTER)
    HookRegistry.register(f"{TREE}.evict_for_alloc", _after_evict, HookType.AFTER)


def _start(config: HooksConfig) -> Any:
    @errors.guard
    def after_scheduler_init(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
        global inspector
        inspector = Inspector.start(scheduler, config, errors)
        logger.warning("mcinspect: scheduler pid %d serves requests on %s:%d", os.getpid(), config.host, inspector.port)

    return after_scheduler_init


@errors.guard
def _after_step(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    if inspector is not None:
        inspector.stats.on_step(scheduler)


@errors.guard
def _after_evict(result: Any, *args: Any, **kwargs: Any) -> None:
    if inspector is not None and result is not None:
        inspector.stats.on_evict(result)
