"""Where a step's wall time went when it was not the scheduler thread's own CPU.

A step's wall splits into the thread's time on a CPU, its time runnable but waiting for one
(`runq`: preempted, or woken and not yet run; the kernel's schedstat), and the rest, `blocked`:
asleep in the kernel while it wanted to run on, which in a Python thread that takes no lock of
its own is waiting for the GIL (a voluntary switch each), or a page fault that waits for I/O.
On a VM the hypervisor may take the CPU away from the whole guest (`steal`, system-wide, in
ticks of 10 ms): the thread's CPU clock does not run then, so that time shows up as blocked.
Blocked with no switch at all is that: the thread never left the CPU as far as the guest knows.
What the process's other threads ran meanwhile says who had the GIL (or the CPU); their CPU
comes from schedstat, which lags up to a scheduler tick for a thread that is running.

Reads are `pread`s of files kept open (a few microseconds each), made outside the timed parts.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _schedstat(fd: int) -> tuple[int, int]:
    """(ns on a CPU, ns runnable waiting for one) of a thread."""
    run, wait, _ = os.pread(fd, 128, 0).split()
    return int(run), int(wait)


@dataclass(frozen=True)
class Reading:
    run_ns: int
    runq_ns: int
    voluntary: int
    involuntary: int
    major_faults: int
    steal_ns: int
    others: dict[str, int]
    """CPU ns of each other thread of the process, by name."""


class StepClock:
    """Readings of the calling (scheduler) thread, the system's steal and the other threads."""

    def __init__(self) -> None:
        self._own = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        self._stat = os.open("/proc/stat", os.O_RDONLY)
        self._others: dict[str, int] = {}

    def watch_threads(self) -> None:
        """Follow every other thread alive now (call after the inspector started its threads)."""
        for fd in self._others.values():
            os.close(fd)
        self._others = {}
        me = str(threading.get_native_id())
        for tid in os.listdir("/proc/self/task"):
            if tid == me:
                continue
            try:
                with open(f"/proc/self/task/{tid}/comm") as comm:
                    name = f"{comm.read().strip()}:{tid}"
                self._others[name] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except FileNotFoundError:  # ended meanwhile
                continue

    def read(self) -> Reading:
        # The running thread's schedstat CPU lags up to a scheduler tick; its clock does not.
        run, wait = time.thread_time_ns(), _schedstat(self._own)[1]
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        steal = int(os.pread(self._stat, 128, 0).split(b"\n", 1)[0].split()[8]) * TICK_NS
        others = {}
        for name, fd in self._others.items():
            try:
                others[name] = _schedstat(fd)[0]
            except (OSError, ValueError):  # the thread ended
                continue
        return Reading(run, wait, usage.ru_nvcsw, usage.ru_nivcsw, usage.ru_majflt, steal, others)


def split(wall_s: float, start: Reading, end: Reading) -> dict[str, float]:
    """The interval's wall split (seconds, counts as floats): cpu, runq, blocked (the rest),
    switches, major faults, and the other threads' CPU above 1 ms (`cpu@NAME`). Steal is left
    out: the kernel adds it to /proc/stat at its next tick, after the interval (`steal_after`)."""
    cpu, runq = (end.run_ns - start.run_ns) / 1e9, (end.runq_ns - start.runq_ns) / 1e9
    out = {
        "cpu": cpu,
        "runq": runq,
        "blocked": max(0.0, wall_s - cpu - runq),
        "vcsw": float(end.voluntary - start.voluntary),
        "ivcsw": float(end.involuntary - start.involuntary),
        "majflt": float(end.major_faults - start.major_faults),
    }
    for name, ns in end.others.items():
        spent = (ns - start.others.get(name, ns)) / 1e9
        if spent >= 0.001:
            out["cpu@" + name] = spent
    return out


def steal_between(start: Reading, end: Reading) -> float:
    """The system's steal (seconds, both CPUs, in ticks) from `start` to `end`: read at the next
    step's start, it covers the step and the sleep after it, by which the kernel has counted it."""
    return (end.steal_ns - start.steal_ns) / 1e9
