"""Hook bodies never raise into sglang: errors are counted, logged once each, and swallowed;
the time the bodies take is summed too (the inspector's own cost on the scheduler thread).

Hooks whose only product is an event are wrapped so that a step nobody observes skips them at
the first frame (`guard_observed`, `around_observed`): that check (one attribute read) is the
only part of a hook not timed."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from time import perf_counter
from typing import Any, Protocol, TypeVar

logger = logging.getLogger("mcinspect.engine_hooks")

F = TypeVar("F", bound=Callable[..., Any])


class Observed(Protocol):
    observed: bool
    """Whether the current step will be captured (EventSink.observed)."""


class ErrorCounter:
    """How many hook bodies failed, per hook name, and how long all of them ran."""

    def __init__(self) -> None:
        self.by_hook: dict[str, int] = {}
        self.total = 0
        """All failures (the sum of `by_hook`, kept: every captured step reports it)."""
        self.seconds = 0.0
        """Wall time inside guarded bodies (two clock reads a call: ~0.1 us)."""

    def guard(self, fn: F) -> F:
        """Wrap a hook body (which returns None) so that any exception is counted instead of raised."""
        name = fn.__qualname__

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> None:
            began = perf_counter()
            try:
                fn(*args, **kwargs)
            except Exception:
                self._failed(name)
            finally:
                self.seconds += perf_counter() - began
            return None

        return guarded  # type: ignore[return-value]

    def guard_untimed(self, fn: F) -> F:
        """`guard` for the one-off set-up hook: its errors are counted, its time is not (it is
        not serving cost; it includes importing mcinspect, tens of ms)."""
        name = fn.__qualname__

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> None:
            try:
                fn(*args, **kwargs)
            except Exception:
                self._failed(name)
            return None

        return guarded  # type: ignore[return-value]

    def _failed(self, name: str) -> None:
        """Count a failure of hook `name` (called while its exception is being handled)."""
        first = name not in self.by_hook
        self.by_hook[name] = self.by_hook.get(name, 0) + 1
        self.total += 1
        if first:  # one traceback per hook, then only the count grows
            logger.exception("mcinspect hook %s failed; the engine is unaffected", name)

    def guard_observed(self, fn: Callable[..., None], step: Observed) -> Callable[..., None]:
        """`guard(fn)`, run only in a step that `step.observed` says will be captured."""
        guarded = self.guard(fn)

        def when_observed(*args: Any, **kwargs: Any) -> None:
            if step.observed:
                guarded(*args, **kwargs)

        return when_observed

    def around_observed(self, before: Callable[..., None], after: Callable[..., None], step: Observed) -> Callable[..., Any]:
        """An AROUND hook (sglang calls it with the original method first): in an observed step,
        guarded `before(*args, **kwargs)` and `after(result, *args, **kwargs)` around the
        original call; that call, its result and its exceptions are sglang's own, untouched.
        One hook instead of a BEFORE and an AFTER: one wrapper less on every call."""
        guarded_before, guarded_after = self.guard(before), self.guard(after)

        def around(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            if not step.observed:
                return original(*args, **kwargs)
            guarded_before(*args, **kwargs)
            result = original(*args, **kwargs)
            guarded_after(result, *args, **kwargs)
            return result

        return around
