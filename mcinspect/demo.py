"""`mcinspect demo`: the embedded CPU engine driven by the cache workload, with a summary."""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mcinspect_engine_hooks.cpu_engine.http_engine import start_http_engine
from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig, EngineStartError, start_engine
from mcinspect_engine_hooks.cpu_engine.workload import Workload

from .client import EngineUnreachable, request
from .ranks import discover
from .schema import SCHEMA_VERSION, EngineInfo, GetStats, Hello, Stats
from .target import Target


@dataclass
class DemoSummary:
    """What one demo run did; printed by the CLI, asserted on by the tests."""

    strategy: str
    page_size: int
    overlap: bool
    seed: int
    engine_start_s: float
    verify: str = "off"
    """The T2 oracles the engine verified with."""
    model: str = ""
    """The model family the engine served."""
    engine: EngineInfo | None = None
    """What the hooks said about the engine (its state layout among it); None without hooks."""
    workload_s: float = 0.0
    requests: int = 0
    waves: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    requested_tokens: int = 0
    """Tokens the requests asked for (max_new_tokens, EOS ignored): all of them are generated."""
    requests_with_hits: int = 0
    cached_by_kind: dict[str, int] = field(default_factory=dict)
    output_digest: str = ""
    workload_hook_seconds: float = 0.0
    """Stats.hook_seconds when the workload ended (the final stats come after the verifier's
    queue drained, references the idle engine ran included)."""
    stats: Stats | None = None
    http_url: str = ""
    """sglang's HTTP server the workload went through; empty for the in-process sglang.Engine."""
    tp_size: int = 1
    """Tensor-parallel ranks (`stats` and `engine` are rank 0's)."""
    rank_ports: list[int] = field(default_factory=list)
    """The request port of each rank's hooks, as `mcinspect info` discovers them."""

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def generated_tokens_per_s(self) -> float:
        return self.generated_tokens / self.workload_s if self.workload_s else 0.0

    @property
    def processed_tokens_per_s(self) -> float:
        """Prompt tokens actually computed (not served from cache) plus generated tokens, per second."""
        computed = self.prompt_tokens - self.cached_tokens + self.generated_tokens
        return computed / self.workload_s if self.workload_s else 0.0


def run_demo(
    config: EmbeddedEngineConfig,
    requests: int,
    on_engine_started: Callable[[float], None] = lambda seconds: None,
    on_wave_done: Callable[[int], None] = lambda done: None,
    after_workload: Callable[[DemoSummary], None] = lambda summary: None,
    record_path: str | None = None,
    http_port: int | None = None,
) -> DemoSummary:
    """Start the embedded engine (behind sglang's HTTP server on `http_port` if given, the
    workload then going over HTTP), run the workload (recorded from its first step to
    `record_path` if given), collect the summary, then call `after_workload` (which may keep
    the engine up for other clients) and shut down."""
    started = time.perf_counter()
    engine, info = _start_engine_with_hooks(config, http_port)
    recording = contextlib.nullcontext()
    if record_path is not None and config.inspector_port is not None:
        recording = _recording(Target("127.0.0.1", config.inspector_port), record_path)
    try:
        summary = DemoSummary(
            strategy=config.strategy,
            page_size=config.page_size,
            overlap=config.effective_overlap,
            seed=config.seed,
            engine_start_s=time.perf_counter() - started,
            verify=config.verify if config.inspector_port is not None else "off",
            model=config.model,
            engine=info,
            http_url=getattr(engine, "url", ""),
            tp_size=config.tp_size,
        )
        on_engine_started(summary.engine_start_s)
        with recording:
            _drive(engine, Workload(seed=config.seed, total_requests=requests), summary, on_wave_done)
        if config.inspector_port is not None:
            summary.rank_ports = [rank.info.request_port for rank in discover((Target("127.0.0.1", config.inspector_port),), "", 30)]
            at_end, summary.stats = _final_stats(Target("127.0.0.1", config.inspector_port), verifying=config.verify != "off")
            summary.workload_hook_seconds = at_end.hook_seconds if at_end is not None else 0.0
        after_workload(summary)
        return summary
    finally:
        engine.shutdown()


VERIFY_SETTLE_S = 2.0
"""The verifier's queue counts as drained when it made no progress for this long (what is left
waits for room no idle engine will free)."""
VERIFY_WAIT_S = 10.0
"""At most this long after the workload (the summary then counts what is still queued)."""


def _final_stats(target: Target, *, verifying: bool) -> tuple[Stats | None, Stats | None]:
    """The engine's stats at the workload's end, and once the verifier has worked through the
    states the workload cached (it runs while the engine idles), or after VERIFY_WAIT_S."""
    ask = GetStats(schema_version=SCHEMA_VERSION)
    # generous: on a loaded machine the engine may still be draining the last steps
    reply = request(target, ask, timeout_s=30)
    if not isinstance(reply, Stats):
        return None, None
    at_end = reply
    if not verifying:
        return at_end, reply
    deadline = time.monotonic() + VERIFY_WAIT_S
    progress, settled_at = (reply.verify.verified, reply.verify.gone), time.monotonic()
    while reply.verify.queued and time.monotonic() < deadline:
        time.sleep(0.2)
        now = request(target, ask, timeout_s=30)
        if not isinstance(now, Stats):
            break
        reply = now
        if (reply.verify.verified, reply.verify.gone) != progress:
            progress, settled_at = (reply.verify.verified, reply.verify.gone), time.monotonic()
        elif time.monotonic() - settled_at > VERIFY_SETTLE_S:
            break
    return at_end, reply


def _start_engine_with_hooks(config: EmbeddedEngineConfig, http_port: int | None = None) -> tuple[Any, EngineInfo | None]:
    """The engine (in process, or sglang's HTTP server on `http_port`) and the hooks'
    EngineInfo; raise EngineStartError (engine shut down) if the hooks did not come up with it:
    a hook that fails logs why and leaves the engine running, as it must."""
    engine = start_engine(config) if http_port is None else start_http_engine(config, http_port)
    if config.inspector_port is None:
        return engine, None
    try:
        info = request(Target("127.0.0.1", config.inspector_port), Hello(schema_version=SCHEMA_VERSION), timeout_s=10)
    except EngineUnreachable:
        engine.shutdown()
        raise EngineStartError(
            f"the engine started but its inspector hooks do not answer on 127.0.0.1:{config.inspector_port}; "
            "their error is in the log above (a port taken since the check? pick another with --port)"
        ) from None
    except BaseException:
        engine.shutdown()
        raise
    if isinstance(info, EngineInfo) and info.unsupported:  # the hooks stayed off: nothing to show
        engine.shutdown()
        raise EngineStartError(info.unsupported)
    return engine, info if isinstance(info, EngineInfo) else None


def _wait_until_observed(target: Target, timeout_s: float = 10.0) -> None:
    """Until the engine has seen the recorder's subscription and will capture the first step's
    events (the stream's subscriptions reach the engine's publisher thread asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = request(target, GetStats(schema_version=SCHEMA_VERSION))
        if not isinstance(stats, Stats) or stats.next_step_observed:
            return
        time.sleep(0.02)


@contextlib.contextmanager
def _recording(target: Target, path: str) -> Iterator[None]:
    """Record the stream of every rank (rank_files.py) on threads while the block runs; the
    first frame is taken before the block starts, so the recording begins at the workload's
    first step."""
    from .recorder import record_ranks

    stop, started, failure = threading.Event(), threading.Event(), []
    ranks = [rank.target for rank in discover((target,), "", 30)]

    def run() -> None:
        try:
            record_ranks(ranks, path, stop=stop, on_frame=lambda result: started.set())
        except Exception as exc:  # noqa: BLE001 - reported to the caller below
            failure.append(exc)
            started.set()

    thread = threading.Thread(target=run, name="mcinspect-demo-recorder", daemon=True)
    thread.start()
    started.wait(timeout=30)
    for rank in ranks:
        _wait_until_observed(rank)
    try:
        yield
    finally:
        time.sleep(0.5)  # let the last steps' deltas arrive
        stop.set()
        thread.join(timeout=30)
    if failure:
        raise failure[0]


@contextlib.contextmanager
def run_demo_in_background(config: EmbeddedEngineConfig, requests: int) -> Iterator[None]:
    """Start the engine here (sglang needs the main thread), then drive it from a thread:
    `requests` requests, then a slower trickle of new seeds so there is always something to
    watch, until the block exits; then shut down."""
    print(f"starting the SGLang engine on the CPU ({config.model}, {config.strategy}, page {config.page_size})...", flush=True)
    engine, _ = _start_engine_with_hooks(config)
    stop = threading.Event()

    def drive() -> None:
        seed, total, pause_s = config.seed, requests, 0.0
        while not stop.is_set():
            summary = DemoSummary(config.strategy, config.page_size, config.effective_overlap, seed, engine_start_s=0.0, model=config.model)
            _drive(engine, Workload(seed=seed, total_requests=total), summary, lambda done: None, stop=stop, pause_s=pause_s)
            seed, total, pause_s = seed + 1, 10, 1.0

    worker = threading.Thread(target=drive, name="mcinspect-demo-workload", daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(timeout=30)
        engine.shutdown()


def _drive(
    engine: Any,
    workload: Workload,
    summary: DemoSummary,
    on_wave_done: Callable[[int], None],
    *,
    stop: threading.Event | None = None,
    pause_s: float = 0.0,
) -> None:
    digest = hashlib.sha256()
    began = time.perf_counter()
    for wave in workload.waves():
        if stop is not None and (stop.is_set() or stop.wait(pause_s)):
            return
        outputs = engine.generate(
            input_ids=[spec.input_ids for spec in wave],
            sampling_params=[{"max_new_tokens": spec.max_new_tokens, "temperature": 0.0, "ignore_eos": True} for spec in wave],
        )
        output_ids = [list(out["output_ids"]) for out in outputs]
        workload.record(wave, output_ids)
        for spec, out, ids in zip(wave, outputs, output_ids, strict=True):
            cached = int(out["meta_info"].get("cached_tokens", 0))
            summary.prompt_tokens += len(spec.input_ids)
            summary.cached_tokens += cached
            summary.requests_with_hits += cached > 0
            summary.cached_by_kind[spec.kind] = summary.cached_by_kind.get(spec.kind, 0) + cached
            summary.generated_tokens += len(ids)
            summary.requested_tokens += spec.max_new_tokens
            digest.update(repr(ids).encode())
        summary.requests += len(wave)
        summary.waves += 1
        on_wave_done(summary.requests)
    summary.workload_s = time.perf_counter() - began
    summary.output_digest = digest.hexdigest()[:16]
