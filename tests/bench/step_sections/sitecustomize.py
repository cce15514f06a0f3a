"""Section timers inside the engine's scheduler process, for `profile_step_hooks.py`.

Python imports this module at start in every process whose path holds this directory; it
acts only where the profile asked for it (STEP_SECTIONS_OUT) and an inspector runs
(MCINSPECT_PORT). Each section is a method of mcinspect's engine side, wrapped by a timer that
books its time to the kind of the step it ran in: that of the batch the step boundary last saw
("decode", "extend", "idle" before the first): a hook inside a forward runs before the
boundary of its own step, so it is booked to the kind of the one before. Every hook body is
timed too (by its name, through the hook guard). A thread writes the totals to
STEP_SECTIONS_OUT every DUMP_EVERY_S (the engine's processes may end without running exit
handlers; written from a step hook, they would be booked to it).

With STEP_SECTIONS_CALLS=1 the sections are not timed; instead the function calls (Python and
C, through `sys.setprofile`) made inside the step boundary's hook are counted, per kind of step.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from time import perf_counter
from typing import Any

OUT_ENV = "STEP_SECTIONS_OUT"
CALLS_ENV = "STEP_SECTIONS_CALLS"
DUMP_EVERY_S = 0.5
SECTIONS = (
    ("inspector", "Inspector._on_step"),
    ("inspector", "Inspector._capture"),
    ("inspector", "Inspector.counters"),
    ("capture", "Capture.step"),
    ("capture", "Capture._marked_nodes"),
    ("capture", "Capture._read_nodes"),
    ("capture", "Capture._apply_requests"),
    ("capture", "Capture._read_free"),
    ("capture", "Capture._reclaim"),
    ("capture", "Capture._move_owners"),
    ("capture", "DeltaParts.to_delta"),
    ("pools_0523", "KvReader.changed"),
    ("pools_0523", "KvReader.read"),
    ("request_reader", "RequestReader.read"),
    ("request_reader", "RequestReader._host_ints"),
    ("contents", "ContentCapture.capture"),
    ("content_mirror", "ContentMirror.unchanged"),
    ("content_mirror", "ContentMirror.store"),
    ("verifier", "Verifier.on_turn"),
    ("verifier", "Verifier.after_capture"),
    ("event_sink", "EventSink.drain"),
    ("publisher", "Publisher.publish"),
    ("stats", "StatsCollector.sample"),
)
"""(module of mcinspect_engine_hooks, Class.method) of each section timed."""

totals: dict[str, list[float]] = {}
"""'section/step kind' -> [calls, seconds]."""
calls: Counter[str] = Counter()
"""'calls/step kind' -> calls made inside the step boundary's hook (STEP_SECTIONS_CALLS)."""
kind = ["idle"]


def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timer(*args: Any, **kwargs: Any) -> Any:
        began = perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            entry = totals.setdefault(f"{label}/{kind[0]}", [0, 0.0])
            entry[0] += 1
            entry[1] += perf_counter() - began

    return timer


def batch_kind(batch: Any) -> str:
    mode = getattr(batch, "forward_mode", None)
    if mode is None:
        return "idle"
    return "decode" if mode.is_decode() else "extend" if mode.is_extend() else "other"


def count_call(frame: Any, event: str, arg: Any) -> None:
    if event in ("call", "c_call"):
        calls[f"calls/{kind[0]}"] += 1


def install_sections(out: str, count: bool) -> None:
    import importlib

    for module_name, dotted in SECTIONS:
        module = importlib.import_module(f"mcinspect_engine_hooks.{module_name}")
        owner_name, method = dotted.split(".")
        owner = getattr(module, owner_name)
        if not count:
            setattr(owner, method, timed(dotted, owner.__dict__[method]))
    from mcinspect_engine_hooks.inspector import Inspector

    on_step = Inspector.on_step

    def counted(self: Any, scheduler: Any, batch: Any) -> None:
        kind[0] = batch_kind(batch)
        if count:
            sys.setprofile(count_call)
        try:
            on_step(self, scheduler, batch)
        finally:
            sys.setprofile(None)
        entry = totals.setdefault(f"Inspector.on_step/{kind[0]}", [0, 0.0])
        entry[0] += 1

    Inspector.on_step = counted

    def dump() -> None:
        while True:
            time.sleep(DUMP_EVERY_S)
            if not any(key.startswith("Inspector.on_step/") for key in list(totals)):
                continue  # not the scheduler (every engine process loads the plugin): leave the file to it
            figures = {**{key: list(value) for key, value in list(totals.items())}, **{key: [n, 0.0] for key, n in list(calls.items())}}
            with open(out + ".part", "w") as f:
                json.dump(figures, f)
            os.replace(out + ".part", out)

    threading.Thread(target=dump, name="step-sections-dump", daemon=True).start()


def install(out: str, count: bool) -> None:
    """Time every hook body through the guard; the sections once the first hook is guarded
    (plugin.register: mcinspect's engine modules are importable by then)."""
    from mcinspect_engine_hooks.guard import ErrorCounter

    guard = ErrorCounter.guard
    installed = [False]

    def timed_guard(self: ErrorCounter, fn: Callable[..., None]) -> Callable[..., None]:
        if not installed[0]:
            installed[0] = True
            install_sections(out, count)
        return guard(self, fn) if count else timed(f"hook {fn.__qualname__}", guard(self, fn))

    ErrorCounter.guard = timed_guard  # type: ignore[method-assign]


if os.environ.get(OUT_ENV) and os.environ.get("MCINSPECT_PORT"):
    install(os.environ[OUT_ENV], os.environ.get(CALLS_ENV) == "1")
