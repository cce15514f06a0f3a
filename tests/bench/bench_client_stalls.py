"""Worst single-step scheduler stall per client action vs tree size, before / after side by side.

A real Inspector (capture, request server, publisher) runs in-process on sglang's real
UnifiedRadixCache (Python tree core, CPU pools; tests/support/cpu_cache.py) built as in
bench_capture.py, with mcinspect's hooks installed. The main thread plays the scheduler: each step
makes 10 cache changes through sglang (bench_capture.Workload), calls `on_step`, then sleeps to a 10
ms step. The tree is built first, then collected once (`gc.collect()`: see there why); the longest
cyclic GC pause of each action is reported all the same. A step's stall is its time as the scheduler
feels it: the work of the step plus how late the thread got the GIL back after its sleep (the
request and publisher threads encode while holding it); the engine side runs at real-time priority
where `chrt` may set it, so that other processes on a shared machine do not preempt it, and its
scheduler thread above its own other threads (SCHEDULER_PRIORITY), with sglang's torch ops on one
thread (SINGLE_OMP_THREAD): on 2 cores either of them otherwise measures the core, not the
inspector. The thread's own CPU time per step is printed beside it, and each worst step's wall as
the kernel saw the thread (step_clock.py): its CPU, waits for a CPU (runq), the rest (blocked: with
voluntary switches a GIL wait, with none the hypervisor taking the vCPU away), the other threads'
CPU. On this machine (a Firecracker microVM) the host takes a vCPU away for ~7 ms at a time now and
then (steal): a busy loop alone shows it, so each size first runs "the machine alone", the scheduler
thread's duty cycle in pure Python with no engine, as the control. The bench's real-time priority
would otherwise bring the kernel's real-time throttle (RT_RUNTIME), so it is off for the run where
the bench may turn it off. Beside the whole step, each action's worst step is given as the
inspector's part of it (`inspector_part`: the late start, its hooks inside sglang's cache changes,
`on_step`): what the issue bounds, the scheduler-thread time a client action costs. The rest is
sglang's own work, which at 100k nodes takes up to tens of ms in steps where the inspector takes
under one. Each client action runs in a child process through the real client (Session / Requester
over the CURVE transport), as `mcinspect` would:

- attach: the first client after the tree grew unwatched (its first full state), then follows
  the live stream;
- snapshot: one GetSnapshot (`mcinspect snapshot`);
- resync: a live session; the engine then loses a delta (as a full publisher queue does) and
  the ring no longer holds it, so the client resyncs from a snapshot;
- every-step: a session that subscribes to every step (`record`, `check PORT`);
- overflow: an every-step session while the hooks' dirty marks overflow (the catch-up path).

"before": the same bench with the main branch's packages (or `--before-site DIR`'s) first on the
path, run back to back in child processes. Run (holds the engine lock: it is a benchmark):

    flock /tmp/mcinspect-engine.lock .venv/bin/python tests/bench/bench_client_stalls.py [N_NODES ...]
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
nan = float("nan")
ACTIONS = ("attach", "snapshot", "resync", "every-step", "overflow")
STEP_S = 0.010
"""A step of the CPU demo is about 10 ms."""
REALTIME = shutil.which("chrt") is not None and subprocess.run(["chrt", "-f", "20", "true"], capture_output=True).returncode == 0
ENGINE_PRIORITY = ["chrt", "-f", "20"] if REALTIME else []
"""The engine side runs real-time where it may: on a shared machine other processes would
otherwise preempt the scheduler thread for longer than the stalls measured."""
SCHEDULER_PRIORITY = 30
"""The scheduler thread's, set once the other threads exist (they keep the process's 20)."""
SINGLE_OMP_THREAD = os.environ.get("MCINSPECT_BENCH_OMP") != "all"
"""The scheduler's torch ops on one thread (MCINSPECT_BENCH_OMP=all: torch's default pool)."""
CLIENT_PRIORITY = ["chrt", "-o", "0"] if REALTIME else []
"""The client, like any other process, does not."""
RT_RUNTIME = "/proc/sys/kernel/sched_rt_runtime_us"
"""The kernel's real-time throttle: when real-time threads use more than this (us of each second),
every real-time task on their CPU stops for the rest of the second (up to 50 ms in a step). That
comes of the bench's real-time priority, not the engine's (sglang's threads are not real-time):
off during the run where the bench may write it (root), restored after (`rt_throttle_off`)."""


# --- the client side (a child process) -------------------------------------------------


def client(action: str, port: int) -> None:
    from mcinspect.client import Requester
    from mcinspect.schema import SCHEMA_VERSION, GetSnapshot, Snapshot
    from mcinspect.session import Session
    from mcinspect.target import Target

    target = Target("127.0.0.1", port)
    if action == "snapshot":
        requester = Requester(target)
        requester.send(GetSnapshot(schema_version=SCHEMA_VERSION))
        if not requester.socket.poll(60_000):
            sys.exit("no snapshot")
        reply = requester.receive()
        assert isinstance(reply, Snapshot), reply
        print(json.dumps({"nodes": len(reply.state.nodes)}), flush=True)
        return
    every_step = action in ("every-step", "overflow")
    with Session(target, every_step=every_step, timeout_s=60.0) as session:
        session.connect()
        print("connected", flush=True)
        deadline = time.monotonic() + (8.0 if action in ("resync", "overflow") else 3.0)
        while time.monotonic() < deadline:
            session.poll(0.05)
            if action == "resync" and session.counters().resyncs:
                break
        counters = session.counters()
        latest = session.latest()
        nodes = len(latest.state.nodes) if latest is not None else 0
        print(json.dumps({"nodes": nodes, "resyncs": counters.resyncs, "gaps": counters.gaps}), flush=True)


# --- the engine side (a child process per variant and size) --------------------------------


class TimedLock:
    """A lock of the inspector's, adding the scheduler thread's waits for it to the step's split."""

    def __init__(self, lock: Any, into: dict[str, float], thread: int, key: str = "lock_wait") -> None:
        self._lock, self._into, self._thread, self._key = lock, into, thread, key

    def __enter__(self) -> bool:
        began = time.perf_counter()
        got = self._lock.acquire()
        if threading.get_ident() == self._thread:
            self._into[self._key] = self._into.get(self._key, 0.0) + time.perf_counter() - began
        return got

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def timed(owner: Any, name: str, into: dict[str, float], key: str) -> None:
    """Wrap `owner.name` (an instance's method) to add its time to `into[key]`."""
    method = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            into[key] = into.get(key, 0.0) + time.perf_counter() - began

    setattr(owner, name, wrapper)


def gil_holds(into: list[tuple[float, float, str, str, str]], min_s: float = 0.005) -> None:
    """Record, for every thread started from now on, each call (C or Python) that ran `min_s` of
    the thread's own CPU time or more outside the calls below it, as (cpu s, that self cpu s,
    thread, name, caller): a call holding the GIL that long is what the scheduler thread waits on. A Python
    frame's self time with no call inside is often a dealloc (a big structure freed)."""
    local = threading.local()

    def profiler(frame: Any, event: str, arg: Any) -> None:
        now = time.thread_time()
        stack = getattr(local, "stack", None)
        if stack is None:
            stack = local.stack = []
        if event in ("call", "c_call"):
            name = f"{arg.__qualname__}" if event == "c_call" else f"{frame.f_code.co_name} ({os.path.basename(frame.f_code.co_filename)})"
            where = frame.f_back if event == "call" else frame
            caller = f"{os.path.basename(where.f_code.co_filename)}:{where.f_lineno} {where.f_code.co_name}" if where else "?"
            stack.append([now, 0.0, name, caller])
        elif stack:
            began, inner, name, caller = stack.pop()
            spent = now - began
            if stack:
                stack[-1][1] += spent
            if spent - inner >= min_s:
                into.append((spent, spent - inner, threading.current_thread().name, name, caller))

    threading.setprofile(profiler)


def census_of(gc: Any) -> dict[str, object]:
    """Tracked objects in each generation after `gc.freeze()`: generation 2's are the survivors
    since (a full collection falls due when those moved there pass a quarter of the heap's
    tracked objects), with their 8 commonest types."""
    out: dict[str, object] = {}
    for generation in range(3):
        objects = gc.get_objects(generation)
        kinds: dict[str, int] = {}
        for o in objects:
            name = type(o).__qualname__
            kinds[name] = kinds.get(name, 0) + 1
        out[f"gen{generation}"] = len(objects)
        out[f"gen{generation}.types"] = dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:8])
        del objects
    return out


def kernel_waits(path: str, since: float, until: float) -> list[str]:
    """The stack sampler's samples of the scheduler thread asleep between `since` and `until`
    (monotonic s), as 'count x state frames', commonest first (stack_sampler.py)."""
    counts: dict[str, int] = {}
    with open(path) as samples:
        for line in samples:
            at, where = line.split(" ", 1)
            if since <= float(at) <= until:
                counts[where.strip()] = counts.get(where.strip(), 0) + 1
    return [f"{n} x {where}" for where, n in sorted(counts.items(), key=lambda kv: -kv[1])[:6]]


def census_mcinspect(gc: Any) -> dict[str, int]:
    """The frozen heap's tracked objects of mcinspect's own types, by type."""
    kinds: dict[str, int] = {}
    for o in gc.get_objects():
        kind = type(o)
        module = kind.__module__  # a descriptor on a few metaclasses' instances
        if isinstance(module, str) and module.startswith("mcinspect"):
            kinds[kind.__qualname__] = kinds.get(kind.__qualname__, 0) + 1
    return kinds


def engine(n_nodes: int, profile: bool, holds: bool = False, census: bool = False, stacks: bool = False) -> dict[str, object]:
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(HERE, "..", "support"))
    import gc
    import random
    import select
    import socket
    import statistics
    from types import SimpleNamespace

    import bench_capture  # installs the CPU patches before sglang is imported
    import step_clock
    import torch

    # sglang's cache ops on the CPU pools here (a GPU engine's run on the device) would use an
    # OpenMP pool spanning both cores of this machine, and its spin-waits for the core the client
    # and mcinspect's request thread hold inflated sglang's own work 2-4x (SINGLE_OMP_THREAD).
    if SINGLE_OMP_THREAD:
        torch.set_num_threads(1)

    from mcinspect_engine_hooks.config import HooksConfig
    from mcinspect_engine_hooks.events import EventSink, hook_points
    from mcinspect_engine_hooks.generations import select as select_generation
    from mcinspect_engine_hooks.guard import ErrorCounter
    from mcinspect_engine_hooks.hooks_0523 import HOOKS
    from mcinspect_engine_hooks.inspector import Inspector
    from mcinspect_engine_hooks.state_log import StateLog

    import cpu_cache

    groups = max(1, n_nodes // (bench_capture.PER_GROUP + 1))
    tree_tokens = (bench_capture.PREFIX + bench_capture.SUFFIX * bench_capture.PER_GROUP) * groups
    spare = 40_000  # slots and KV for the steps' own inserts: 3 slots a step net; 20k ran out on a loaded machine
    scheduler = cpu_cache.build_cache(mamba_slots=groups * bench_capture.PER_GROUP + spare, kv_size=tree_tokens * 5 // 4 + spare * 16)
    scheduler.server_args = SimpleNamespace(model_path="bench", mamba_radix_cache_strategy="extra_buffer", dp_size=1)
    scheduler.page_size = 1
    scheduler.enable_overlap = False
    scheduler.max_total_num_tokens = tree_tokens
    scheduler.device = "cpu"
    selection = select_generation()
    errors, sink, state_log = ErrorCounter(), EventSink(), StateLog()
    cpu_cache.install_hooks([(t, w, h) for t, w, h in hook_points(sink, errors, state_log, HOOKS)])
    held: list[tuple[float, float, str, str, str]] = []
    if holds:
        gil_holds(held)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inspector = Inspector(scheduler, HooksConfig(base_port=port, verify="off", track_writes=False), errors, sink, state_log, selection)
    work = bench_capture.Workload(scheduler)
    rng = random.Random(0)
    for group in range(groups):  # the tree grows while nobody watches: steps are only counted
        for i in range(bench_capture.PER_GROUP):
            work.insert(group)
            if i % 10 == 0:
                inspector.on_step(scheduler, None)
    # The build's burst of tracked objects (sglang's nodes, tensors, keys, lists) leaves a full
    # collection due within a few hundred steps, which then falls in whatever step allocates next:
    # at 10k nodes (790k tracked objects) 500-700 ms, in the quiet phase with no client at all when
    # that phase is longer. The inspector adds no tracked objects that survive (a census after each
    # action grows by sglang's own ~44 a step, with or without a client). An engine builds its tree
    # over minutes and has run those collections; so does the bench, before it measures.
    gc.collect()
    # What a full collection of this heap costs, wherever it falls (all of it the scheduler's:
    # it holds the GIL): timed once more, now that the build's garbage is gone.
    began = time.perf_counter()
    gc.collect()
    full_gc = {"full-gc": time.perf_counter() - began, "tracked": len(gc.get_objects())}
    if census:  # what survives from now on is all that generation 2 holds (see `census_of`)
        out_census: dict[str, object] = {"heap.mcinspect": census_mcinspect(gc)}
        gc.freeze()
        out_census["heap"] = gc.get_freeze_count()

    stalls: list[float] = []
    own: list[float] = []
    """Per step: the inspector's part of its stall (`inspector_part`)."""
    cpu: list[float] = []
    phases: list[dict[str, float]] = []
    """Per step: where its time went (the worst step's split is reported)."""
    gc_pauses: list[tuple[float, int]] = []
    gc_began = [0.0]
    main_thread = threading.get_ident()
    in_step: dict[str, float] = {}
    """The running step's cyclic GC time on the scheduler thread, and the oldest generation."""
    timing = [False]
    untimed = [0.0]
    """Collections on the scheduler thread outside a step's timed part: one set off by the
    bench's own bookkeeping (a step's split is a new dict) is due all the same, and would have
    fallen in the engine's step: added to the step before it (`gc.untimed`)."""

    def gc_timer(phase: str, info: dict) -> None:  # Python's cyclic collections, any thread
        if phase == "start":
            gc_began[0] = time.perf_counter()
            return
        pause = time.perf_counter() - gc_began[0]
        gc_pauses.append((pause, info["generation"]))
        if holds and pause >= 0.005:
            held.append((pause, pause, threading.current_thread().name, f"gc gen {info['generation']}", "(wall)"))
        if threading.get_ident() == main_thread and not timing[0]:
            untimed[0] += pause
        elif threading.get_ident() == main_thread:
            in_step["gc"] = in_step.get("gc", 0.0) + pause
            in_step["gen"] = max(in_step.get("gen", -1), info["generation"])
        else:  # ended while the step ran: the GIL it held
            in_step["gc@other"] = in_step.get("gc@other", 0.0) + pause

    gc.callbacks.append(gc_timer)
    if REALTIME:
        # Above the process's other threads (mcinspect's request and publisher threads, ZMQ's I/O
        # thread, all FIFO 20 from `chrt`): FIFO does not share a core among equals, and on 2
        # cores those threads sending a 100k-node snapshot otherwise preempt the scheduler for
        # 50 ms (involuntary switches in its worst steps). They still contend for the GIL.
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(SCHEDULER_PRIORITY))
    lock = inspector._lock
    inspector._lock = TimedLock(lock, in_step, main_thread)
    # The publisher's counters, which each captured step's Counters read.
    inspector.publisher._counter_lock = TimedLock(inspector.publisher._counter_lock, in_step, main_thread, "counter_wait")
    timed(inspector.capture, "step", in_step, "capture")
    timed(inspector.contents, "capture", in_step, "contents")
    timed(inspector.publisher, "publish", in_step, "publish")
    profiler = cProfile.Profile() if profile else None
    worst_profile = [0.0, ""]
    clock = step_clock.StepClock()
    clock.watch_threads()
    spans: list[tuple[float, float]] = []
    """Per step: from when it should have started (its wake-up) to its end, monotonic s."""
    if stacks:  # between the scheduler thread and the process's other real-time threads
        stacks_path = os.path.join(tempfile.mkdtemp(prefix="mcinspect-stacks-"), "samples")
        sampler_command = [sys.executable, os.path.join(HERE, "stack_sampler.py"), str(os.getpid()), str(threading.get_native_id())]
        sampler = subprocess.Popen(["chrt", "-f", "25", *sampler_command, stacks_path] if REALTIME else [*sampler_command, stacks_path])
    wake_at = time.perf_counter()
    rested = last_woke = clock.read()

    def step() -> None:
        nonlocal wake_at, rested, last_woke
        in_step.clear()
        began, began_cpu = time.perf_counter(), time.thread_time()
        late = max(0.0, began - wake_at)
        woke = clock.read()
        if phases:  # the previous step's, now that the kernel has counted it
            phases[-1]["steal"] = step_clock.steal_between(last_woke, woke)
        last_woke = woke
        timing[0] = True
        hooks_before = errors.seconds
        work.ten_changes(rng)
        worked = time.perf_counter()
        hooks = errors.seconds - hooks_before
        if profiler is not None:
            profiler.enable()
        inspector.on_step(scheduler, None)
        if profiler is not None:
            profiler.disable()
        timing[0] = False
        done = clock.read()
        ended = time.perf_counter()
        stalls.append(late + ended - began)
        cpu.append(time.thread_time() - began_cpu)
        # The late start's wait for a CPU (runnable after the sleep; the rest of it is the GIL).
        late_runq = (woke.runq_ns - rested.runq_ns) / 1e9
        where = step_clock.split(ended - began, woke, done)
        phases.append(
            {"late": late, "work": worked - began, "hooks": hooks, "on_step": ended - worked, **in_step, "late.runq": late_runq, **where}
        )
        spans.append((began - late, ended))
        rested = done
        if profiler is not None:
            if stalls[-1] > worst_profile[0]:
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
                worst_profile[:] = [stalls[-1], text.getvalue()]
            profiler.clear()
        if untimed[0]:
            stalls[-1] += untimed[0]
            phases[-1]["gc.untimed"] = untimed[0]
            untimed[0] = 0.0
        own.append(inspector_part(phases[-1]))
        wake_at = max(ended, began + STEP_S - late)
        time.sleep(max(0.0, wake_at - time.perf_counter()))

    for _ in range(100):
        step()
    out: dict[str, object] = {"quiet": statistics.median(stalls), "quiet.cpu": statistics.median(cpu), **full_gc}
    out["quiet.inspector"] = statistics.median(own)
    worst = max(range(len(stalls)), key=stalls.__getitem__)
    out.update({"quiet-max": stalls[worst], "quiet-max.cpu": max(cpu), "quiet-max.split": phases[worst]})
    worst_own = max(range(len(own)), key=own.__getitem__)
    out.update({"quiet-max.inspector": own[worst_own], "quiet-max.inspector-split": phases[worst_own]})
    if stacks:
        out["quiet-max.stacks"] = kernel_waits(stacks_path, *spans[worst])
    for action in ACTIONS:
        clock.watch_threads()  # the request thread may have been restarted
        spans.clear()
        stalls.clear()
        own.clear()
        cpu.clear()
        phases.clear()
        gc_pauses.clear()
        worst_profile[:] = [0.0, ""]
        command = [sys.executable, os.path.abspath(__file__), "--client", action, str(port)]
        child = subprocess.Popen(CLIENT_PRIORITY + command, stdout=subprocess.PIPE, text=True)
        # The bench's own gap between actions (reports, a census, starting the client: a fork of
        # this 1 GB process) is no step's: the first step is due now, not at the last one's end.
        wake_at, rested = time.perf_counter(), clock.read()
        connected_at = None
        disturbed = False
        lines = []
        while child.poll() is None:
            step()
            if connected_at is None and select.select([child.stdout], [], [], 0)[0]:
                lines.append(child.stdout.readline())
                if lines[-1].startswith("connected"):
                    connected_at = len(stalls)
            if connected_at is not None and not disturbed and len(stalls) - connected_at > 20:
                disturbed = True
                if action == "resync":  # a delta lost on the way out (the publisher's queue was full)
                    with inspector._lock:
                        inspector._seq += 1
                elif action == "overflow":  # more dirty marks than the sink holds
                    max_dirty, sink.max_dirty = sink.max_dirty, 0
                    step()
                    sink.max_dirty = max_dirty
        for _ in range(50):  # what the action left behind (a big delta being encoded)
            step()
        report = "".join(lines + [child.stdout.read()]).strip().splitlines()
        if child.returncode != 0:
            sys.exit(f"client {action} failed")
        worst = max(range(len(stalls)), key=stalls.__getitem__)
        out[action] = stalls[worst]
        out[action + ".cpu"] = max(cpu)
        out[action + ".split"] = phases[worst]
        worst_own = max(range(len(own)), key=own.__getitem__)
        out[action + ".inspector"] = own[worst_own]
        out[action + ".inspector-split"] = phases[worst_own]
        out[action + ".profile"] = worst_profile[1]
        out[action + ".gc"] = max((pause for pause, _ in gc_pauses), default=0.0)
        out[action + ".client"] = report[-1] if report else ""
        out[action + ".full"] = sum(1 for _, generation in gc_pauses if generation == 2)
        if stacks:
            out[action + ".stacks"] = kernel_waits(stacks_path, *spans[worst])
        if census:
            out_census[action] = census_of(gc)
    inspector.publisher.close()
    inspector.server.close()
    if census:
        out["census"] = out_census
    if stacks:
        sampler.kill()
    if holds:
        out["gil-holds"] = [
            f"{cpu * 1e3:6.1f} self {own * 1e3:6.1f}  [{thread}] {name}  <- {caller}"
            for cpu, own, thread, name, caller in sorted(held, key=lambda h: -h[1])[:60]
        ]
    return out


def inspector_part(split: dict[str, float]) -> float:
    """The inspector's part of a step's stall: the late start (the GIL, which only its threads
    take from the scheduler thread here), its hooks inside sglang's cache changes, `on_step`
    (with any collection that fell in it) and an untimed collection added to the step. The
    rest of the step, sglang's own work, is the engine's."""
    return split["late"] + split["hooks"] + split["on_step"] + split.get("gc.untimed", 0.0)


# --- the machine alone (a child process) ---------------------------------------------------

MACHINE_STEPS = 1000


def machine() -> dict[str, float]:
    """The machine's own stalls, with no engine and no inspector: the scheduler thread's duty
    cycle (5 ms of pure Python, a sleep to a 10 ms step) at its priority. A step's wall beyond
    its CPU, with no switch, is time the hypervisor took the vCPU (steal)."""
    sys.path.insert(0, HERE)
    import step_clock

    if REALTIME:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(SCHEDULER_PRIORITY))
    clock = step_clock.StepClock()
    first = clock.read()
    worst, worst_split, hiccups = 0.0, {}, 0
    for _ in range(MACHINE_STEPS):
        woke, began = clock.read(), time.perf_counter()
        x = 0
        while time.perf_counter() - began < STEP_S / 2:
            x += sum(range(200))
        done, ended = clock.read(), time.perf_counter()
        where = step_clock.split(ended - began, woke, done)
        hiccups += ended - began - where["cpu"] > 0.003
        if ended - began > worst:
            worst, worst_split = ended - began, where
        time.sleep(max(0.0, began + STEP_S - time.perf_counter()))
    return {"worst": worst, "hiccups": hiccups, "steal": step_clock.steal_between(first, clock.read()), **worst_split}


# --- the driver ---------------------------------------------------------------------------


LOOK_INTO = ("--profile", "--gil-holds", "--gc-census", "--kernel-stacks")
"""Options of the engine side that change what it measures: with --after-only alone."""


def run_variant(site: str | None, n_nodes: int, key_dir: str, options: list[str]) -> dict:
    env = dict(os.environ, MCINSPECT_KEY_DIR=key_dir)
    if site:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, os.path.abspath(__file__), "--engine", str(n_nodes), *options]
    done = subprocess.run(ENGINE_PRIORITY + command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"engine bench failed ({n_nodes} nodes):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def install_main() -> str:
    """The main branch's packages, installed into a directory of their own."""
    source, site = tempfile.mkdtemp(prefix="mcinspect-main-"), tempfile.mkdtemp(prefix="mcinspect-before-")
    archive = subprocess.run(["git", "-C", HERE, "archive", "main"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", source], input=archive, check=True)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", site, source]
    subprocess.run(pip, check=True)
    return site


COUNTS = ("vcsw", "ivcsw", "majflt")


def split_text(split: dict[str, float]) -> str:
    """A worst step's split, ms: late (GIL back after the sleep; late.runq: of it, waiting for
    a CPU), work (the cache changes), on_step and within it capture / contents / publish /
    lock_wait, gc (collections on the scheduler thread, oldest generation); then the step's
    wall (late excluded) as the kernel saw the thread (step_clock.py): cpu, runq, blocked, its
    voluntary / involuntary switches and major faults, the other threads' CPU (`cpu@name:tid`),
    the system's steal over the step and the sleep after it (10 ms ticks); counter_wait: the
    scheduler thread's wait for the publisher's counter lock."""
    parts = [
        f"{key} {value:.0f}" if key in COUNTS else f"{key} {value * 1e3:.1f}"
        for key, value in split.items()
        if key != "gen" and not (key == "majflt" and not value)
    ]
    return ", ".join(parts) + (f" (gen {split['gen']:.0f})" if "gen" in split else "")


@contextlib.contextmanager
def rt_throttle_off() -> Iterator[str]:
    """The real-time throttle off for the run where the bench may turn it off (restored after);
    yields what the header says of it."""
    was = None
    note = "no real-time priority here, so no real-time throttle"
    if REALTIME:
        try:
            with open(RT_RUNTIME) as f:
                current = f.read().strip()
            if current != "-1":
                with open(RT_RUNTIME, "w") as f:
                    f.write("-1")
                was = current
            note = f"real-time throttle off for the run ({RT_RUNTIME} was {current})"
        except OSError as e:
            note = f"real-time throttle left on ({e.strerror}): a step with tens of ms in runq measures it"
    try:
        yield note
    finally:
        if was is not None:
            with open(RT_RUNTIME, "w") as f:
                f.write(was)


def main(args: list[str]) -> None:
    """Options: --before-site DIR (the "before" packages; default: main's, installed now),
    --after-only (this tree alone, to look into it), --profile (with --after-only: cProfile of
    each action's worst step; it slows every step, so its walls are not the figures), --gil-holds
    (with --after-only: the request and publisher threads' calls that ran 5 ms or more, and the
    cyclic GC pauses as long, on any thread; the profile hook slows those threads and adds its
    own time to the Python frames' self time, so only C calls and short frames are telling),
    --gc-census (with --after-only: `gc.freeze()` after the build, then after each action the
    tracked objects that survived since, by generation and type: what brings a full collection
    due; frozen, the heap is no longer walked, so its walls are not the figures), --kernel-stacks
    (with --after-only: where in the kernel the scheduler thread slept during each action's worst
    step, sampled from another process every 0.5 ms: stack_sampler.py; needs root)."""
    before_site = None
    if args[:1] == ["--before-site"]:
        before_site, args = args[1], args[2:]
    after_only = "--after-only" in args
    options = [a for a in args if a in LOOK_INTO] if after_only else []
    sizes = [int(a) for a in args if not a.startswith("--")] or [1_000, 10_000, 100_000]
    if before_site is None and not after_only:
        before_site = install_main()
    key_dir = tempfile.mkdtemp(prefix="mcinspect-keys-")
    print(f"worst single-step scheduler stall, ms (quiet: median step without a client, quiet-max: its worst); before = {before_site}")
    print(
        f"wall: the step as the scheduler felt it (GIL waits included{', real-time priority' if REALTIME else ''}); cpu: its own thread's"
    )
    with rt_throttle_off() as throttle:
        print(throttle)
        print(
            f"{'action':>11} {'nodes':>7} {'before wall':>12} {'after wall':>11} {'before insp':>12} {'after insp':>11} {'before cpu':>11} {'after cpu':>10}"
        )
        for n in sizes:
            run_size(n, before_site, after_only, key_dir, options)


def run_size(n: int, before_site: str | None, after_only: bool, key_dir: str, options: list[str]) -> None:
    """One tree size: the machine alone, then before and after, and their report."""
    probe = subprocess.run(ENGINE_PRIORITY + [sys.executable, os.path.abspath(__file__), "--machine"], capture_output=True, text=True)
    alone = json.loads(probe.stdout.strip().splitlines()[-1])
    print(
        f"  the machine alone ({MACHINE_STEPS} steps of 5 ms pure Python, no engine): worst step {alone['worst'] * 1e3:.1f} ms"
        f" ({split_text({k: v for k, v in alone.items() if k not in ('worst', 'hiccups', 'steal')})}),"
        f" {alone['hiccups']} steps with > 3 ms of wall beyond their CPU, system steal {alone['steal'] * 1e3:.0f} ms",
        flush=True,
    )
    before = None
    if not after_only:
        before = run_variant(before_site, n, key_dir, [])
        print(f"  before, {n} nodes: {json.dumps({k: v for k, v in before.items() if not k.endswith('.profile')})}", flush=True)
    after = run_variant(None, n, key_dir, options)
    for line in after.get("gil-holds", []):
        print("    gil hold:", line, flush=True)
    if "census" in after:
        print(f"    gc census (survivors since the build's freeze): {json.dumps(after['census'])}", flush=True)
    for action in ("quiet", "quiet-max", *ACTIONS):
        b = before or {}
        walls = f"{b.get(action, nan) * 1e3:>12.1f} {after[action] * 1e3:>11.1f}"
        inspector = f"{b.get(action + '.inspector', nan) * 1e3:>12.1f} {after[action + '.inspector'] * 1e3:>11.1f}"
        cpus = f"{b.get(action + '.cpu', nan) * 1e3:>11.1f} {after[action + '.cpu'] * 1e3:>10.1f}"
        print(f"{action:>11} {n:>7} {walls} {inspector} {cpus}", flush=True)
    for title, key in (("the worst step's split", ".split"), ("the split of the step with the most inspector time", ".inspector-split")):
        print(f"    {title}, ms:", flush=True)
        for action in ("quiet-max", *ACTIONS):
            if before is not None:
                print(f"      {action} before: {split_text(before[action + key])}", flush=True)
            print(f"      {action} after: {split_text(after[action + key])}", flush=True)
            if key == ".split":
                for line in after.get(action + ".stacks", []):
                    print(f"        asleep in the kernel: {line}", flush=True)
    b = before or {}
    print(
        f"    a full collection of the built heap, ms before / after: {b.get('full-gc', nan) * 1e3:.0f}"
        f" / {after['full-gc'] * 1e3:.0f} ({b.get('tracked', '-')} / {after['tracked']} tracked objects)",
        flush=True,
    )
    gcs = ", ".join(
        f"{a} {b.get(a + '.gc', nan) * 1e3:.0f} / {after[a + '.gc'] * 1e3:.0f} ({b.get(a + '.full', '-')} / {after[a + '.full']} full)"
        for a in ACTIONS
    )
    print(f"    longest cyclic GC pause during each action (any thread), ms before / after: {gcs}", flush=True)
    for action in ACTIONS:
        print(f"    {action} client saw: before {(before or {}).get(action + '.client')}  after {after[action + '.client']}", flush=True)
        if after.get(action + ".profile"):
            print(after[action + ".profile"], flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--machine"]:
        print(json.dumps(machine()), flush=True)
    elif sys.argv[1:2] == ["--client"]:
        client(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["--engine"]:
        flags = sys.argv[3:]
        result = engine(int(sys.argv[2]), "--profile" in flags, "--gil-holds" in flags, "--gc-census" in flags, "--kernel-stacks" in flags)
        print(json.dumps(result), flush=True)
    else:
        main(sys.argv[1:])
