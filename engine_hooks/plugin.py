"""sglang general plugin (entry point group `sglang.srt.plugins`, name `mcinspect`).

sglang calls `register()` at the top of every engine process (0.5.10, without plugins:
registry.install_at_import, when the scheduler module is imported). It does nothing unless
MCINSPECT_PORT is set. Hooks go through sglang's HookRegistry (registry.hook_registry: its
stand-in on 0.5.10); each body is guarded, so an error in mcinspect is counted and logged,
never raised into the scheduler.

The hook table: `hooks_0523.HOOKS`, as `generations.select()` finds it in this sglang (`mcinspect hooks` prints it).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from . import hooks_0523
from .config import ConfigError, HooksConfig
from .guard import ErrorCounter

logger = logging.getLogger("mcinspect.engine_hooks")

SCHEDULER = hooks_0523.SRT + hooks_0523.SCHEDULER
RAISE_IN_HOOK_ENV = "MCINSPECT_SELF_TEST_RAISE"
"""Set to 1 to make a hook body raise at every step: proves errors are counted, not raised."""

errors = ErrorCounter()
inspector: Any = None
"""This process's Inspector, once its scheduler exists."""


def register() -> None:
    """Entry point: register the hooks if MCINSPECT_PORT asks for them, those of the sglang
    generation feature detection finds (generations.select); in a release mcinspect does not
    read, one line in the log and an inspector port that says so (`mcinspect info`)."""
    try:
        config = HooksConfig.from_env()
    except ConfigError as exc:
        logger.error("mcinspect disabled: %s", exc)
        return
    if config is None:
        return
    from .generations import Unsupported, select
    from .registry import hook_registry

    HookRegistry, HookType = hook_registry()  # noqa: N806 - sglang's class, or its stand-in

    try:
        selection = select()
    except Exception as exc:  # noqa: BLE001 - feature detection imports sglang modules
        selection = Unsupported(f"feature detection failed ({exc}); the hooks stay off and the engine runs untouched")
    if isinstance(selection, Unsupported):
        logger.error("mcinspect: %s", selection.reason)  # at the demo's engine log level too
        HookRegistry.register(f"{SCHEDULER}.__init__", _start_unsupported(config, selection.reason), HookType.AFTER)
        return
    if selection.skipped:
        logger.warning("mcinspect: %s", selection.skipped_line())

    from .events import EventSink, hook_points
    from .state_log import StateLog

    sink = EventSink()
    state_log = StateLog()
    for target, when, hook in hook_points(sink, errors, state_log, selection.hooks, track_writes=config.track_writes):
        HookRegistry.register(target, hook, HookType(when))
    HookRegistry.register(f"{SCHEDULER}.__init__", _start(config, sink, state_log, selection), HookType.AFTER)
    HookRegistry.register(f"{SCHEDULER}.process_batch_result", _after_step, HookType.AFTER)
    idle = next(h for h in selection.hooks if h.body == "scheduler.idle")  # on_idle, or 0.5.10's self_check_during_idle
    HookRegistry.register(idle.dotted, _when_idle, HookType.AFTER)
    if os.environ.get(RAISE_IN_HOOK_ENV) == "1":
        HookRegistry.register(f"{SCHEDULER}.process_batch_result", _raise_for_self_test, HookType.AFTER)


def _start_unsupported(config: HooksConfig, reason: str) -> Any:
    @errors.guard_untimed
    def after_scheduler_init(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
        from .unsupported import UnsupportedInspector

        global inspector
        inspector = UnsupportedInspector(scheduler, config, reason)

    return after_scheduler_init


def _start(config: HooksConfig, sink: Any, state_log: Any, selection: Any) -> Any:
    @errors.guard_untimed
    def after_scheduler_init(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
        from .inspector import Inspector

        global inspector
        refusal = selection.generation.refusal(scheduler.tree_cache)
        if refusal:  # the hooks stay registered; with no step observed they return at their first frame
            from .unsupported import UnsupportedInspector

            sink.observed = False
            logger.error("mcinspect: %s; the engine runs untouched", refusal)  # an unsupported release: error level
            inspector = UnsupportedInspector(scheduler, config, refusal)
            return
        inspector = Inspector(scheduler, config, errors, sink, state_log, selection)
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
