"""What a fault is: a named set of hooks on real sglang methods that reproduces one bug class."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ...families import DEFAULT_FAMILY, FAMILIES

HookKind = Literal["before", "after", "around", "replace"]
"""sglang's HookType values (`sglang.srt.plugins.hook_registry.HookType`)."""

SRT = "sglang.srt."
GDN_BACKEND = SRT + "layers.attention.linear.gdn_backend.GDNAttnBackend"
HYBRID_BACKEND_MODULE = SRT + "layers.attention.hybrid_linear_attn_backend"
MAMBA2_BACKEND = HYBRID_BACKEND_MODULE + ".Mamba2AttnBackend"
MAMBA_COMPONENT = SRT + "mem_cache.unified_cache.components.mamba.MambaComponent"
MAMBA_COMPONENT_0519 = SRT + "mem_cache.unified_cache.components.mamba_component.MambaComponent"
"""0.5.19: the same class in its module before the components package's rename (a fallback)."""
MAMBA_COMPONENT_0516 = SRT + "mem_cache.unified_cache_components.mamba_component.MambaComponent"
"""0.5.16: the class in the package before `unified_cache` (a fallback after 0.5.19's)."""
REQ_TO_TOKEN_POOL = SRT + "mem_cache.memory_pool.HybridReqToTokenPool"
MAMBA_RADIX_CACHE = SRT + "mem_cache.mamba_radix_cache.MambaRadixCache"
"""0.5.10-0.5.15: the cache that caches a request's state itself (no MambaComponent)."""
TRACK_PLAN = SRT + "layers.attention.mamba.prefill_track_metadata.build_prefill_track_plan"
MAMBA2_METADATA = SRT + "layers.attention.mamba.mamba2_metadata.Mamba2Metadata"

REAL_37836 = tuple(
    (
        release,
        f"sglang {release} has #37836 for real (its Mamba2 track plan indexes the chunk states per request): "
        "T2 fires on the unpatched nemotron-h engine, so a fault caught by T2 proves nothing there "
        "(test_releases shows the real bug caught)",
    )
    for release in ("0.5.13", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19")
)
"""Where the unpatched engine already caches wrong Mamba2 states (#37836, fixed in 0.5.20): 0.5.13's and
0.5.15's MambaRadixCache backends have the same `_init_track_ssm_indices` (caught there, README;
0.5.14 not run)."""

RECOMPUTE_CHECK = "T2-recompute"
"""The check of invariant T2 (a cached state equals its prefix recomputed alone): the only one
that sees a wrong state whose slot, seqlen and depth are all right (`demo --verify`)."""

LOG_ENV = "MCINSPECT_FAULT_LOG"
"""A file to append one JSON line per faulty action to (tests measure detection latency)."""
LOG_LIMIT = 200
_logged = 0

EXTRA_BUFFER_STRATEGIES = ("extra_buffer", "extra_buffer_lazy")
ALL_STRATEGIES = ("no_buffer", *EXTRA_BUFFER_STRATEGIES)
ALL_FAMILIES = tuple(FAMILIES)


@dataclass(frozen=True)
class Hook:
    """One patch: sglang's HookRegistry calls `fn` as the `kind` hook of `target`.

    Signatures follow HookRegistry: before(*args), after(result, *args),
    around(original, *args), replace(*args); `args[0]` is `self` for a method.
    """

    target: str
    kind: HookKind
    fn: Callable[..., Any]
    fallback: Hook | None = None
    """Stands in where this sglang lacks `target` (an older release's method or module, chosen
    by feature detection when the hooks are applied: `chosen`)."""
    also: tuple[Hook, ...] = ()
    """Registered with this hook wherever it is the chosen one: a release that splits the one call
    the newer target stands for over two methods (MambaRadixCache's cache_unfinished_req and
    cache_finished_req for MambaComponent's per-request caching)."""

    feature: str = ""
    """A second target that must exist too for this hook to be chosen over its fallback: 0.5.15
    ships 0.5.16's MambaComponent module unused (it builds a MambaRadixCache); 0.5.16's
    `int8_ckpt_pool` tells them apart, as `generations` does."""

    def chosen(self) -> Hook:
        """This hook, or the first of its fallbacks whose target (and feature) exists in the installed sglang."""
        if self.fallback is None or (_exists(self.target) and (not self.feature or _exists(self.feature))):
            return self
        return self.fallback.chosen()


def component_hook(method: str, kind: HookKind, fn: Callable[..., Any], mrc: Hook | None = None) -> Hook:
    """A hook on `MambaComponent.method`, falling back to the class's 0.5.19 module, then 0.5.16's,
    then `mrc` (the MambaRadixCache releases' method, where the fault re-creates it there)."""
    oldest = Hook(f"{MAMBA_COMPONENT_0516}.{method}", kind, fn, fallback=mrc, feature=f"{MAMBA_COMPONENT_0516}.int8_ckpt_pool")
    return Hook(f"{MAMBA_COMPONENT}.{method}", kind, fn, fallback=Hook(f"{MAMBA_COMPONENT_0519}.{method}", kind, fn, fallback=oldest))


def extra_buffer(component: Any) -> bool:
    """Whether the MambaComponent's cache runs extra_buffer (0.5.16 keeps the flag on the component)."""
    return bool(getattr(component.cache, "enable_mamba_extra_buffer", None) or getattr(component, "enable_mamba_extra_buffer", False))


def _exists(target: str) -> bool:
    """Whether sglang has `target` (`sglang.srt.` dotted), by the plugin's own feature detection; a
    module that fails to import counts as absent. Only once sglang has finished importing:
    `Fault.install` asks when HookRegistry applies the hooks."""
    from ...generations import DetectionFailed, resolves  # imports torch: not at interpreter start

    try:
        return resolves(target.removeprefix(SRT))
    except DetectionFailed:
        return False


@dataclass(frozen=True)
class Fault:
    """One upstream bug class, reproduced in the real engine by patching sglang.

    `expected_checks` names the mcinspect checks (keys of `mcinspect.checks.CHECKS`) that
    must report it, the one that catches it first leading. `strategies`, `page_sizes` and
    `families` say where the bug exists (`page_sizes` empty: any page size the strategy
    accepts; `families`: the model families whose code path has the mechanism).
    """

    name: str
    upstream: str
    description: str
    expected_checks: tuple[str, ...]
    strategies: tuple[str, ...]
    hooks: tuple[Hook, ...]
    page_sizes: tuple[int, ...] = ()
    trigger: str = ""
    """Which requests of the demo workload make the bug bite."""
    environment: tuple[tuple[str, str], ...] = ()
    """Environment variables the engine needs while the fault is active."""
    families: tuple[str, ...] = ALL_FAMILIES
    requires: tuple[str, ...] = ()
    """Engine features the mechanism needs ("mixed-chunk": --enable-mixed-chunk)."""
    real_on: tuple[tuple[str, str], ...] = ()
    """(sglang release, why) where the unpatched engine has this bug for real: the checks fire
    without the fault, so running it there proves nothing (tests/integration/test_releases.py
    shows the real bug caught instead)."""

    def real_in(self, release: str) -> str:
        """Why the fault proves nothing on `release` ("" where it does)."""
        return next((why for where, why in self.real_on if where == release), "")

    @property
    def targets(self) -> tuple[str, ...]:
        """The sglang methods or functions this fault patches."""
        return tuple(dict.fromkeys(hook.target for hook in self.hooks))

    def applies_to(self, strategy: str, page_size: int, family: str = DEFAULT_FAMILY) -> bool:
        """Whether the bug can happen under this cache configuration and model family."""
        return family in self.families and strategy in self.strategies and (not self.page_sizes or page_size in self.page_sizes)

    def install(self) -> None:
        """Register the hooks with sglang's HookRegistry.

        They take effect at the next `HookRegistry.apply_hooks()`, which sglang's
        `load_plugins()` runs at the top of every engine process.
        """
        from ...registry import hook_registry

        HookRegistry, HookType = hook_registry()  # noqa: N806 - sglang's class, or its stand-in (0.5.10)

        def register(hooks: tuple[Hook, ...]) -> None:
            for hook in hooks:
                for one in (hook, *hook.also):
                    HookRegistry.register(one.target, one.fn, HookType(one.kind))

        register(tuple(hook for hook in self.hooks if hook.fallback is None))
        probed = tuple(hook for hook in self.hooks if hook.fallback is not None)
        if not probed:
            return
        # Which target this release has can be told only once sglang imports completely: here the
        # registry itself is still being imported (a probe now is a circular import). The choice
        # is made when HookRegistry applies the hooks (load_plugins), once per process.
        apply_hooks = HookRegistry.__dict__["apply_hooks"]

        def choose_then_apply() -> None:
            HookRegistry.apply_hooks = apply_hooks
            register(tuple(hook.chosen() for hook in probed))
            HookRegistry.apply_hooks()

        HookRegistry.apply_hooks = staticmethod(choose_then_apply)


def log_faulty_action(fault: str, *, slot: int | None = None, node: int | None = None, rid: str | None = None) -> None:
    """Where MCINSPECT_FAULT_LOG names a file, append {fault, step, slot, node, rid}: `step` is the
    inspector's next capture, the first that can show the action (null without hooks). The
    first LOG_LIMIT actions are kept; the first one is what detection latency is measured from."""
    global _logged
    path = os.environ.get(LOG_ENV)
    if not path or _logged >= LOG_LIMIT:
        return
    from ...extensions import current_step  # the inspector's next capture, through the one interface

    step = current_step()
    _logged += 1
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"fault": fault, "step": step, "slot": slot, "node": node, "rid": rid}) + "\n")
