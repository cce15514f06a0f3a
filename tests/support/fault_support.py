"""Applying a fault in-process, through sglang's HookRegistry as the engine does, and undoing it.

Needs the CPU patches (`cpu_engine.patches.install()`) before sglang is first imported.
"""

from __future__ import annotations

import pkgutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sglang.srt.plugins.hook_registry import HookRegistry

from mcinspect_engine_hooks.cpu_engine.faults import FAULTS, Fault, initial_state, ownership

_MISSING = object()


@contextmanager
def applied(fault: Fault) -> Iterator[None]:
    """The fault applied through sglang's HookRegistry; originals and registry restored after."""
    saved_hooks = {target: list(hooks) for target, hooks in HookRegistry._hooks.items()}
    saved_patched = set(HookRegistry._patched)
    originals = []
    for target in fault.targets:
        owner_path, attr = target.rsplit(".", 1)
        owner = pkgutil.resolve_name(owner_path)
        originals.append((owner, attr, owner.__dict__.get(attr, _MISSING), getattr(owner, attr)))
    fault.install()
    HookRegistry.apply_hooks()
    try:
        yield
    finally:
        for owner, attr, raw, original in originals:
            patched = getattr(owner, attr)
            if raw is _MISSING:  # an inherited method: the patch shadowed it on the subclass
                delattr(owner, attr)
            else:
                setattr(owner, attr, raw)
            _unpropagate(patched, original)
        HookRegistry._hooks.clear()
        HookRegistry._hooks.update(saved_hooks)
        HookRegistry._patched = saved_patched
        ownership._leaked.clear()
        initial_state._blank_started.clear()


def _unpropagate(patched: Any, original: Any) -> None:
    """Undo HookRegistry's rebinding of `from module import function` copies."""
    for module in list(sys.modules.values()):
        try:
            names = [name for name, value in vars(module).items() if value is patched]
        except TypeError:
            continue
        for name in names:
            setattr(module, name, original)


def both(fault_name: str, scenario: Callable[[], Any]) -> tuple[Any, Any]:
    """`scenario()` without, then with the fault."""
    clean = scenario()
    with applied(FAULTS[fault_name]):
        faulty = scenario()
    return clean, faulty
