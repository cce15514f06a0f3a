"""Hook guards: a failing body is counted and swallowed; sglang's own call is never touched."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from mcinspect_engine_hooks.guard import ErrorCounter


def _slow_failure(*args: object) -> None:
    time.sleep(0.01)
    raise RuntimeError("a bug in a hook")


def test_a_failing_body_is_counted_swallowed_and_timed() -> None:
    errors = ErrorCounter()
    assert errors.guard(_slow_failure)(1, 2) is None
    assert errors.guard(_slow_failure)() is None
    assert errors.total == 2 and errors.by_hook == {"_slow_failure": 2}
    assert errors.seconds >= 0.02


def test_the_set_up_hook_is_counted_but_not_timed() -> None:
    errors = ErrorCounter()
    errors.guard_untimed(_slow_failure)()
    assert errors.total == 1 and errors.seconds == 0.0


def test_an_event_hook_runs_only_in_observed_steps() -> None:
    errors, step, calls = ErrorCounter(), SimpleNamespace(observed=False), []
    hook = errors.guard_observed(lambda *args: calls.append(args), step)
    hook("skipped")
    step.observed = True
    hook("kept")
    assert calls == [("kept",)] and errors.total == 0


def test_around_leaves_sglangs_call_its_result_and_its_exceptions_alone() -> None:
    errors, step, seen = ErrorCounter(), SimpleNamespace(observed=True), []
    around = errors.around_observed(_slow_failure, lambda result, *args: seen.append((result, args)), step)
    assert around(lambda x: x * 2, 21) == 42  # `before` failed: counted, the call still ran
    assert seen == [(42, (21,))] and errors.total == 1

    def sglang_raises(x: int) -> int:
        raise ValueError("sglang's own error")

    with pytest.raises(ValueError, match="sglang's own error"):
        around(sglang_raises, 1)
    step.observed = False
    assert around(lambda x: x + 1, 1) == 2 and len(seen) == 1  # unobserved: the hooks skip
