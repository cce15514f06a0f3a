"""The HookRegistry stand-in for sglang releases without `sglang.srt.plugins` (0.5.10):
the same before / after / around / replace semantics as sglang's own HookRegistry (compared against
the real one of the installed sglang), guarded, idempotent, and nothing at all without
MCINSPECT_PORT. Runs without 0.5.10: the opt-in test_releases runs it in the engine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

from mcinspect_engine_hooks import registry
from mcinspect_engine_hooks.registry import StandInHookType, StandInRegistry

OWNER = "owner_for_registry_tests"
"""A module written per test: the hooks' targets (fresh each time, so a patch never leaks)."""

SOURCE = textwrap.dedent(
    """
    calls = []

    class Box:
        def add(self, a, b=0):
            calls.append(("add", a, b))
            return a + b

        @classmethod
        def make(cls, n):
            return n * 10

        @staticmethod
        def twice(n):
            return 2 * n

        def fail(self):
            raise KeyError("sglang's own error")

    def double(n):
        return 2 * n
    """
)


@pytest.fixture
def owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / f"{OWNER}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(OWNER, None)
    StandInRegistry.reset()
    import importlib

    yield importlib.import_module(OWNER)
    StandInRegistry.reset()
    sys.modules.pop(OWNER, None)


def _trace_hooks(log: list[Any]) -> list[tuple[str, str, Any]]:
    """One hook of each kind on Box.add, as mcinspect registers them (target, kind, fn)."""

    def before(self: Any, a: int, b: int = 0) -> Any:
        log.append(("before", a, b))
        return (self, a + 1), {"b": b}  # changes the arguments

    def after(result: int, self: Any, a: int, b: int = 0) -> Any:
        log.append(("after", result))
        return result * 100 if result == 4 else None  # None keeps the result

    def around(original: Any, self: Any, a: int, b: int = 0) -> Any:
        log.append(("around in", a))
        result = original(self, a, b=b)
        log.append(("around out", result))
        return result

    def replace(n: int) -> int:  # registered after the after hook, applied before it
        log.append(("replace", n))
        return 3 * n

    return [
        (f"{OWNER}.Box.add", "before", before),
        (f"{OWNER}.Box.add", "after", after),
        (f"{OWNER}.Box.add", "around", around),
        (f"{OWNER}.double", "after", lambda result, n: result + 1),
        (f"{OWNER}.double", "replace", replace),
    ]


def _apply_with(reg: Any, kinds: Any, hooks: list[tuple[str, str, Any]]) -> None:
    for target, kind, fn in hooks:
        reg.register(target, fn, kinds(kind))
    reg.apply_hooks()


def test_before_after_around_chain_as_sglangs_own_registry_does(owner: Any) -> None:
    """The same hooks through sglang's HookRegistry and through the stand-in: the same calls
    in the same order, the same arguments reach the method, the same results come back."""
    traces = []
    for reg, kinds in ((HookRegistry, HookType), (StandInRegistry, StandInHookType)):
        sys.modules.pop(OWNER, None)
        import importlib

        module = importlib.import_module(OWNER)
        log: list[Any] = []
        saved = dict(HookRegistry._hooks), set(HookRegistry._patched)
        try:
            _apply_with(reg, kinds, _trace_hooks(log))
            box = module.Box()
            results = (box.add(3), box.add(1, b=5), module.double(2))
        finally:
            HookRegistry._hooks.clear()
            HookRegistry._hooks.update(saved[0])
            HookRegistry._patched.clear()
            HookRegistry._patched.update(saved[1])
        traces.append((results, log, list(module.calls)))
    assert traces[0] == traces[1]
    results, log, calls = traces[1]
    assert results == (400, 7, 7)  # 3 -> 4 by before, 4 -> 400 by after; 1 + 1 + 5 kept; 3 * 2 + 1
    assert calls == [("add", 4, 0), ("add", 2, 5)]
    assert log[:4] == [("around in", 3), ("before", 3, 0), ("after", 4), ("around out", 400)]


def test_class_and_static_methods_and_module_functions_keep_their_form(owner: Any) -> None:
    StandInRegistry.register(f"{OWNER}.Box.make", lambda result, cls, n: result + 1, StandInHookType.AFTER)
    StandInRegistry.register(f"{OWNER}.Box.twice", lambda result, n: result + 1, StandInHookType.AFTER)
    StandInRegistry.register(f"{OWNER}.double", lambda result, n: -result, StandInHookType.AFTER)
    from_import = owner.double  # a `from owner import double` made before the hooks applied
    holder = type(sys)("holder_for_registry_tests")
    holder.double = from_import
    sys.modules[holder.__name__] = holder
    try:
        StandInRegistry.apply_hooks()
        assert isinstance(owner.Box.__dict__["make"], classmethod) and owner.Box.make(2) == 21
        assert isinstance(owner.Box.__dict__["twice"], staticmethod) and owner.Box.twice(2) == 5
        assert owner.double(3) == -6 and holder.double(3) == -6  # the stale binding follows, as in sglang's
    finally:
        sys.modules.pop(holder.__name__)


def test_a_hook_that_raises_never_reaches_the_engine_but_the_methods_own_errors_do(owner: Any) -> None:
    def broken_before(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("mcinspect bug")

    def broken_after(result: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("mcinspect bug")

    def broken_around_before_call(original: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("mcinspect bug")

    def broken_around_after_call(original: Any, *args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise RuntimeError("mcinspect bug")

    def passing_around(original: Any, *args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    for fn, kind in (
        (broken_before, "before"),
        (broken_after, "after"),
        (broken_around_before_call, "around"),
        (broken_around_after_call, "around"),
    ):
        StandInRegistry.register(f"{OWNER}.Box.add", fn, StandInHookType(kind))
    StandInRegistry.register(f"{OWNER}.Box.fail", passing_around, StandInHookType.AROUND)
    StandInRegistry.register(f"{OWNER}.Box.missing", passing_around, StandInHookType.AFTER)  # logged, skipped
    StandInRegistry.apply_hooks()
    assert owner.Box().add(2, b=3) == 5
    with pytest.raises(KeyError, match="sglang's own error"):
        owner.Box().fail()
    assert f"{OWNER}.Box.missing" not in StandInRegistry._patched


def test_applying_twice_wraps_once(owner: Any) -> None:
    seen: list[int] = []
    StandInRegistry.register(f"{OWNER}.Box.add", lambda result, *a, **k: seen.append(result), StandInHookType.AFTER)
    StandInRegistry.apply_hooks()
    StandInRegistry.apply_hooks()
    owner.Box().add(1)
    assert seen == [1]


def test_hooks_wait_for_the_trigger_module_then_apply(owner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without sglang.srt.plugins, what waits for the registry runs once the trigger module
    has executed, and the stand-in applies right after (registry.install_at_import's path)."""
    trigger = "trigger_for_registry_tests"
    (tmp_path / f"{trigger}.py").write_text("executed = True\n")
    monkeypatch.setattr(registry, "TRIGGER", trigger)
    monkeypatch.setattr(registry, "sglang_has_plugins", lambda: False)
    seen: list[int] = []

    def register() -> None:
        assert sys.modules[trigger].executed
        reg, kinds = registry.hook_registry()
        assert reg is StandInRegistry
        reg.register(f"{OWNER}.Box.add", lambda result, *a, **k: seen.append(result), kinds.AFTER)

    registry.when_ready(register)
    owner.Box().add(1)
    assert seen == []  # not applied before the trigger
    import importlib

    try:
        importlib.import_module(trigger)
    finally:
        sys.modules.pop(trigger, None)
    owner.Box().add(2)
    assert seen == [2]
    assert not any(getattr(f, "name", None) == trigger for f in sys.meta_path)  # one shot


def _fresh_interpreter(env_port: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MCINSPECT_PORT", "MCINSPECT_CPU_ENGINE")}
    if env_port is not None:
        env["MCINSPECT_PORT"] = env_port
    code = "import sys; print('mcinspect_engine_hooks.registry' in sys.modules, [type(f).__name__ for f in sys.meta_path if type(f).__name__ == '_RunAfterImport'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def test_the_pth_line_does_nothing_without_mcinspect_port_nor_where_sglang_has_plugins() -> None:
    """The wheel's mcinspect_pre_plugins.pth runs in every interpreter of the venv: without
    MCINSPECT_PORT it imports nothing; with it, on this sglang (which has plugins), it waits
    for nothing."""
    assert _fresh_interpreter(None) == "False []"
    assert _fresh_interpreter("29999") == "True []"
