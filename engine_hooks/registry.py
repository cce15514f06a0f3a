"""Where mcinspect's hooks are registered: sglang's HookRegistry, or, in a release without
`sglang.srt.plugins` (0.5.10), a stand-in that does what `HookRegistry.apply_hooks` does.

Releases from 0.5.11 call `load_plugins()` at the top of each scheduler process: it runs the
`sglang.srt.plugins` entry points (plugin.register) and then `HookRegistry.apply_hooks()`.
0.5.10 has neither, so `mcinspect_pre_plugins.pth` (in the wheel, run at every interpreter
start) calls `install_at_import()`: with MCINSPECT_PORT set and no `sglang.srt.plugins` in the
installed sglang, a meta-path finder waits for `sglang.srt.managers.scheduler` (imported by
every process that starts an engine, the scheduler processes included) and, once it has
executed, runs what waits for the registry (`when_ready`: the plugin's register, the CPU
engine's fault) and applies the hooks. Anything else: nothing happens.
"""

from __future__ import annotations

import enum
import functools
import importlib.abc
import importlib.util
import logging
import os
import pkgutil
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from .config import PORT_ENV

logger = logging.getLogger("mcinspect.engine_hooks")

REAL_REGISTRY = "sglang.srt.plugins.hook_registry"
TRIGGER = "sglang.srt.managers.scheduler"
"""The module whose import shows an engine is starting in this process (0.5.11's load_plugins
runs from the function it defines, after it has executed)."""


class StandInHookType(enum.Enum):
    """sglang's HookType values (REPLACE of functions only: the CPU engine's faults)."""

    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


class StandInRegistry:
    """`HookRegistry`'s register / apply_hooks / reset, for before / after / around / replace
    hooks on methods and module functions: one wrapper chain per target, replacements first,
    then the rest in registration order, each target applied once (apply_hooks is
    idempotent), a target that fails to resolve logged and skipped, as sglang's does."""

    _hooks: dict[str, list[tuple[StandInHookType, Callable[..., Any]]]] = {}
    _patched: set[str] = set()

    @classmethod
    def register(cls, target: str, hook: Callable[..., Any], hook_type: StandInHookType = StandInHookType.AFTER) -> None:
        cls._hooks.setdefault(target, []).append((StandInHookType(hook_type.value), hook))

    @classmethod
    def apply_hooks(cls) -> None:
        for target, hooks in sorted(cls._hooks.items()):
            if target in cls._patched:
                continue
            try:
                _apply(target, hooks)
                cls._patched.add(target)
            except Exception:  # noqa: BLE001 - a missing target must not stop the engine
                logger.exception("mcinspect: failed to apply hooks to %s", target)

    @classmethod
    def reset(cls) -> None:
        cls._hooks.clear()
        cls._patched.clear()


def _apply(target: str, hooks: list[tuple[StandInHookType, Callable[..., Any]]]) -> None:
    owner_path, attr = target.rsplit(".", 1)
    owner = pkgutil.resolve_name(owner_path)
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else None
    decorator = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    original = raw.__func__ if decorator else getattr(owner, attr)
    wrapped = original
    for hook_type, hook in sorted(hooks, key=lambda h: h[0] is not StandInHookType.REPLACE):  # stable, as sglang's
        wrapped = _wrap(wrapped, hook, hook_type)
    setattr(owner, attr, decorator(wrapped) if decorator else wrapped)
    if isinstance(owner, types.ModuleType):  # `from module import fn` elsewhere holds the original
        for module in list(sys.modules.values()):
            if isinstance(module, types.ModuleType) and module is not owner:
                for name, value in list(vars(module).items()):
                    if value is original:
                        setattr(module, name, wrapped)


def _wrap(original: Callable[..., Any], hook: Callable[..., Any], hook_type: StandInHookType) -> Callable[..., Any]:
    """HookRegistry's semantics: before may return (args, kwargs); after gets the result first
    and may replace it (None keeps it); around gets the original first; replace stands in for
    it. Guarded: an error of the hook is logged and the original's call and result stand; the
    original's own errors pass through unchanged."""
    if hook_type is StandInHookType.BEFORE:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                changed = hook(*args, **kwargs)
            except Exception:  # noqa: BLE001 - never into the engine
                logger.exception("mcinspect: before hook on %s raised", original.__qualname__)
                changed = None
            if changed is not None:
                args, kwargs = changed
            return original(*args, **kwargs)

    elif hook_type is StandInHookType.AFTER:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                changed = hook(result, *args, **kwargs)
            except Exception:  # noqa: BLE001 - never into the engine
                logger.exception("mcinspect: after hook on %s raised", original.__qualname__)
                changed = None
            return result if changed is None else changed

    elif hook_type is StandInHookType.REPLACE:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return hook(*args, **kwargs)
            except Exception:  # noqa: BLE001 - never into the engine
                logger.exception("mcinspect: replacement of %s raised", original.__qualname__)
                return original(*args, **kwargs)

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen: dict[str, Any] = {}

            def call_original(*a: Any, **k: Any) -> Any:
                try:
                    seen["result"] = original(*a, **k)
                except BaseException:
                    seen["raised"] = True
                    raise
                return seen["result"]

            try:
                return hook(call_original, *args, **kwargs)
            except Exception:
                if "raised" in seen:  # the original's own error
                    raise
                logger.exception("mcinspect: around hook on %s raised", original.__qualname__)
                return seen["result"] if "result" in seen else original(*args, **kwargs)

    functools.update_wrapper(wrapper, original)
    return wrapper


def sglang_has_plugins() -> bool:
    """Whether the installed sglang has `sglang.srt.plugins`, found without importing sglang
    (this runs at interpreter start)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return True  # no sglang: nothing to stand in for
    return any(os.path.isdir(os.path.join(p, "srt", "plugins")) for p in spec.submodule_search_locations)


def hook_registry() -> tuple[Any, Any]:
    """(registry, hook type enum) to register with: sglang's where it has one, the stand-in
    otherwise. The one place plugin.register and the faults take it from."""
    if sglang_has_plugins():
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        return HookRegistry, HookType
    return StandInRegistry, StandInHookType


_waiting: list[Callable[[], None]] = []


def when_ready(action: Callable[[], None]) -> None:
    """Run `action` once the registry can take hooks, before they are applied: with sglang's,
    when it is imported (load_plugins applies after); with the stand-in, when the scheduler
    module has executed (the stand-in applies right after)."""
    if sglang_has_plugins():
        if REAL_REGISTRY in sys.modules:
            action()
        else:
            sys.meta_path.insert(0, _RunAfterImport(REAL_REGISTRY, action))
        return
    _waiting.append(action)
    if TRIGGER in sys.modules:
        _run_waiting()
    elif not any(isinstance(f, _RunAfterImport) and f.name == TRIGGER for f in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport(TRIGGER, _run_waiting))


def _run_waiting() -> None:
    while _waiting:
        action = _waiting.pop(0)
        try:
            action()
        except Exception:  # noqa: BLE001 - the engine must start whatever mcinspect does
            logger.exception("mcinspect: registering hooks failed; the engine runs untouched")
    StandInRegistry.apply_hooks()


_installed = False


def install_at_import() -> None:
    """The .pth line's call: in a release without sglang.srt.plugins, with MCINSPECT_PORT set,
    run plugin.register when the engine starts in this process. Idempotent; never raises."""
    global _installed
    try:
        if _installed or not os.environ.get(PORT_ENV) or sglang_has_plugins():
            return
        _installed = True
        from . import plugin

        when_ready(plugin.register)
    except Exception:  # noqa: BLE001 - runs at every interpreter start of the venv
        logger.exception("mcinspect: the import-time hooks could not be installed")


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Runs `action` right after module `name` executes, then leaves sys.meta_path."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name = name
        self.action = action

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot; also lets the normal finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module
        action = self.action

        def exec_then_act(module: types.ModuleType) -> None:
            run_module(module)
            action()

        spec.loader.exec_module = exec_then_act  # type: ignore[method-assign]
        return spec
