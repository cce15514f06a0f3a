"""The step gate: a rested thread waits while the scheduler is inside the step hook, not longer."""

from __future__ import annotations

import threading
import time

from mcinspect_engine_hooks.step_gate import MAX_WAIT_S, StepGate


def test_a_rest_returns_at_once_when_no_step_hook_runs() -> None:
    gate = StepGate()
    began = time.perf_counter()
    gate.rest(0.0)
    assert time.perf_counter() - began < MAX_WAIT_S / 2


def test_a_rest_waits_until_the_step_hook_has_returned() -> None:
    gate = StepGate()
    gate.close()
    rested = threading.Event()
    thread = threading.Thread(target=lambda: (gate.rest(0.0), rested.set()))
    thread.start()
    time.sleep(MAX_WAIT_S / 5)
    assert not rested.is_set()  # the hook still runs
    gate.open()
    assert rested.wait(MAX_WAIT_S)
    thread.join()


def test_a_hook_that_never_returns_delays_a_rest_by_at_most_the_bound() -> None:
    gate = StepGate()
    gate.close()
    began = time.perf_counter()
    gate.rest(0.0)
    assert MAX_WAIT_S * 0.9 <= time.perf_counter() - began < MAX_WAIT_S * 3


def test_closing_never_waits_for_a_resting_thread() -> None:
    gate = StepGate()
    gate._lock.acquire()  # a resting thread between its acquire and its release
    began = time.perf_counter()
    gate.close()
    gate.open()
    assert time.perf_counter() - began < MAX_WAIT_S / 10
    gate._lock.release()
    gate.close()  # and the gate closes again at the next step
    rested = threading.Event()
    thread = threading.Thread(target=lambda: (gate.rest(0.0), rested.set()))
    thread.start()
    assert not rested.wait(MAX_WAIT_S / 5)
    gate.open()
    assert rested.wait(MAX_WAIT_S)
    thread.join()
