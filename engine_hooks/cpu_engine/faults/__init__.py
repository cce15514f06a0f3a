"""The fault library: upstream mamba-cache bug classes, reproduced in the real engine on demand.

Each `Fault` patches the real sglang 0.5.23 methods involved (never fakes snapshots), so
mcinspect's checks can be shown to catch the bug. A fault is active only where
MCINSPECT_FAULT names it: `install_fault_from_env()` (called by the CPU engine's
`patches.install()`, in every embedded-engine process at interpreter start) registers its
hooks with sglang's HookRegistry as soon as sglang imports the registry, before
`load_plugins()` applies them (0.5.10: with the stand-in, when the scheduler module is imported:
engine_hooks/registry.py). Hooks are applied in every engine process; the patched
methods run only in the scheduler processes. A hook whose target an older release lacks names
that release's method as its `fallback`, chosen by feature detection when the hooks are applied
(`base.Hook.chosen`); `Fault.real_on` names the releases that have the bug for real.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from . import initial_state, ownership, ranks, track, working, writes
from .base import RECOMPUTE_CHECK, Fault, Hook

__all__ = ["ENV_VAR", "FAULTS", "RECOMPUTE_CHECK", "Fault", "FaultError", "Hook", "get_fault", "install_fault_from_env"]

ENV_VAR = "MCINSPECT_FAULT"
"""Names the fault to install; unset or empty: nothing is patched."""

FAULTS: dict[str, Fault] = {
    fault.name: fault for fault in (*track.FAULTS, *initial_state.FAULTS, *ownership.FAULTS, *working.FAULTS, *writes.FAULTS, *ranks.FAULTS)
}

logger = logging.getLogger("mcinspect.faults")
_installed: Fault | None = None


class FaultError(ValueError):
    """An unknown fault name (the message lists the known ones), or a second fault in one process."""


def get_fault(name: str) -> Fault:
    """The fault called `name`, or FaultError."""
    try:
        return FAULTS[name]
    except KeyError:
        raise FaultError(f"unknown fault {name!r}; choose one of {', '.join(FAULTS)}") from None


def install_fault_from_env(environ: Mapping[str, str] = os.environ) -> Fault | None:
    """Install the fault MCINSPECT_FAULT names in this process; return it (None if unset).

    Idempotent. Raises FaultError for an unknown name, before anything is patched. sglang
    itself is not imported here: the hooks are registered when sglang imports its
    HookRegistry (at once if it already has).
    """
    global _installed
    name = environ.get(ENV_VAR, "")
    if not name:
        return None
    fault = get_fault(name)
    if _installed is not None:
        if _installed is not fault:
            raise FaultError(f"fault {_installed.name!r} is already installed in this process; cannot add {name!r}")
        return fault
    _installed = fault
    os.environ.update(fault.environment)  # before sglang reads it; child processes inherit it
    from ...registry import when_ready

    when_ready(lambda: _register(fault))
    return fault


def _register(fault: Fault) -> None:
    fault.install()
    logger.info("mcinspect fault %r installed in pid %d: %s", fault.name, os.getpid(), ", ".join(fault.targets))
