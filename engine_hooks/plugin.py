"""sglang general plugin (entry point group `sglang.srt.plugins`, name `mcinspect`).

sglang calls `register()` at the top of every engine process. It does nothing unless
MCINSPECT_PORT is set. Hooks go through sglang's HookRegistry; each body is guarded, so an
error in mcinspect is counted and logged, never raised into the scheduler.

| sglang 0.5.23 method | hook | what mcinspect does |
|---|---|---|
| `managers.scheduler.Scheduler.__init__` | after | build the Inspector: first full capture, bind ports |
| `managers.scheduler.Scheduler.process_batch_result` | after | step boundary: capture, fingerprint, publish a delta (or, with no client subscribed or the live budget spent, count the step) |
| `managers.scheduler.Scheduler.on_idle` | after | no batch to run: catch up if a snapshot request waits or the live stream is due |
| (the cache, tree core and pool hooks of `events.py`) | before / after | events and dirty marks |
| (the insert and track-plan hooks of `state_log.py`) | before / after | prefix tokens and origin of each cached state, for T2 |
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .config import ConfigError, HooksConfig
from .guard import ErrorCounter

logger = logging.getLogger("mcinspect.engine_hooks")

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
RAISE_IN_HOOK_ENV = "MCINSPECT_SELF_TEST_RAISE"
"""Set to 1 to make a hook body raise at every step: proves errors are counted, not raised."""

errors = ErrorCounter()
inspector: Any = None
"""This process's Inspector, once its scheduler exists."""


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

    from .events import EventSink, hook_points, state_log_points
    from .state_log import StateLog

    sink = EventSink()
    state_log = StateLog()
    for target, when, hook in [*hook_points(sink, errors, track_writes=config.track_writes), *state_log_points(state_log, errors)]:
        HookRegistry.register(target, hook, HookType(when))
    HookRegistry.register(f"{SCHEDULER}.__init__", _start(config, sink, state_log), HookType.AFTER)
    HookRegistry.register(f"{SCHEDULER}.process_batch_result", _after_step, HookType.AFTER)
    HookRegistry.register(f"{SCHEDULER}.on_idle", _when_idle, HookType.AFTER)
    if os.environ.get(RAISE_IN_HOOK_ENV) == "1":
        HookRegistry.register(f"{SCHEDULER}.process_batch_result", _raise_for_self_test, HookType.AFTER)


def _start(config: HooksConfig, sink: Any, state_log: Any) -> Any:
    @errors.guard_untimed
    def after_scheduler_init(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
        from .inspector import Inspector

        global inspector
        inspector = Inspector(scheduler, config, errors, sink, state_log)
        logger.warning(
            "mcinspect: scheduler pid %d on %s, requests :%d, stream :%d",
            os.getpid(),
            config.host,
            inspector.port,
            inspector.publisher.port,
        )

    return after_scheduler_init


@errors.guard
def _after_step(result: Any, scheduler: Any, batch: Any = None, *args: Any, **kwargs: Any) -> None:
    if inspector is not None:
        inspector.on_step(scheduler, batch)


@errors.guard
def _when_idle(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
    if inspector is not None:
        inspector.on_idle(scheduler)


@errors.guard
def _raise_for_self_test(result: Any, *args: Any, **kwargs: Any) -> None:
    raise RuntimeError(f"raised on purpose ({RAISE_IN_HOOK_ENV}=1)")
