"""Everything mcinspect keeps in one scheduler process: capture, seq, stream, request socket.

The scheduler thread calls `on_step` at each step boundary; it captures what changed, numbers
it and hands it to the publisher's queue (never waits). The request thread serves snapshots
from the same state under the same lock, so a snapshot's `seq` is exactly the last delta it
includes.

Capture on demand (the default): while no client is subscribed to the stream, a step boundary
only counts the step (every SAMPLE_EVERY-th also samples the stats); the hooks keep marking
what changes and counting evictions, and the hooks that only make events skip, so the
next capture (a subscriber arrived, or a snapshot was asked for) is one delta that catches up
with everything since, at the cost of what changed. That delta's events cover its own step
only: `Counters.unobserved_steps` tells clients the events before it are gone. A snapshot
request waits up to SNAPSHOT_WAIT_S for that catch-up; an idle engine catches up in
`Scheduler.on_idle`. With subscribers, every step is captured if one of them asked for it
(EVERY_STEP_TOPIC: recorders, checkers), else the live stream captures as often as the time
budget allows (live_cadence.py). MCINSPECT_CAPTURE=every-step captures every step regardless.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
import time
from typing import Any

import msgspec

from mcinspect import auth
from mcinspect.schema import (
    SCHEMA_VERSION,
    Counters,
    EngineInfo,
    ErrorReply,
    Event,
    GetVerify,
    Reply,
    Seq,
    StartVerify,
    Stats,
    Step,
)
from mcinspect_kernels.fingerprint import slot_bytes

from . import extensions, gc_pause
from .capture import Capture
from .catch_up import CATCH_UP_BUDGET_S
from .config import HooksConfig
from .contents import ContentCapture
from .events import EventSink
from .families import family_of_architecture
from .generations import Selection, strategy_field
from .guard import ErrorCounter
from .live_cadence import LiveCadence
from .placement import Placement, placement_fields
from .published_state import SnapshotParts
from .publisher import Publisher
from .self_check import SelfCheck
from .server import RequestServer
from .state_log import StateLog
from .stats import SAMPLE_EVERY, StatsCollector
from .step_gate import StepGate
from .verifier import Verifier, VerifyUnavailable

logger = logging.getLogger("mcinspect.engine_hooks")

SNAPSHOT_WAIT_S = 2.0
"""How long a snapshot request waits for the scheduler to catch up before serving the last
capture (still consistent with the stream: the next delta carries what it lacks)."""
SNAPSHOT_CATCH_UP_S = 0.25
"""Snapshot requests make the scheduler catch up at most this often; in between they get the
last capture (a flood of requests costs the scheduler at most 4 captures a second)."""


class Inspector:
    """One per scheduler process; built in the AFTER hook of `Scheduler.__init__`."""

    def __init__(
        self, scheduler: Any, config: HooksConfig, errors: ErrorCounter, sink: EventSink, state_log: StateLog, selection: Selection
    ) -> None:
        placement = Placement.of_scheduler(scheduler)
        self.port = config.request_port(placement.rank)
        if placement.attn_dp_size > 1 and config.verify != "off":
            # Every rank must run the reference forward together (its collectives), on the same
            # state; attention DP's groups each hold their own requests and tree: one would wait.
            logger.warning(
                "mcinspect: T2 verification is off under attention DP (--attn-dp-size): its groups cannot run one reference together"
            )
            config = dataclasses.replace(config, verify="off")
        self.errors = errors
        self.sink = sink
        self._lock = threading.Lock()
        self._seq = 0
        self._step = 0
        self._captured_step = 0
        self._unobserved = 0
        self._wanted = threading.Event()
        """A snapshot request waits for a capture."""
        self._fresh = threading.Condition()
        self.capture = Capture(scheduler, sink, selection.generation, budget_s=CATCH_UP_BUDGET_S)
        self.capture.full_state(Step(0))
        self.contents = ContentCapture(scheduler)
        self.state_log = state_log
        capture = self.capture
        self.verifier = Verifier(scheduler, config, state_log, capture.slot_of, capture.path_tokens, capture.state_nodes, sink)
        self.self_check = SelfCheck.from_env()
        self.every_step = config.capture == "every-step" or (not config.capture and self.self_check is not None)
        sink.observed = self.every_step  # nobody can have subscribed yet
        self.cadence = LiveCadence(config.live_budget)
        self.stats = StatsCollector(selection.generation.pools.mamba_allocator(scheduler.req_to_token_pool), sink)
        self._last_snapshot: SnapshotParts | None = None
        self._caught_up_at = float("-inf")
        keys = self._keys(config)
        self.gate = StepGate()
        self.publisher = Publisher(config.host, self.port + 1, keys=keys, rest=self.gate.rest)
        info = msgspec.structs.replace(
            engine_info(scheduler, self.port, self.publisher.port, self.capture.full_detail, placement),
            verify=config.verify,
            verify_share=config.verify_share,
            verify_rate=config.verify_rate,
            track_writes=""
            if not config.track_writes or not any(h.kind == "write" for h in selection.hooks)
            else "extend"
            if _decode_graphs(scheduler)
            else "all",
            hooks_generation=selection.generation.name,
            hooks_skipped=tuple(h.target for h in selection.skipped),
        )
        self.server = RequestServer(
            config.host,
            self.port,
            token=config.token,
            info=info,
            snapshot=self.snapshot,
            history=self.publisher.history_after,
            stats=self.stats_reply,
            handlers={StartVerify: self._start_verify, GetVerify: self._get_verify},
            keys=keys,
            rest=self.gate.rest,
        )
        self._publish_key(config, keys)
        self.publisher.start()
        self.server.start()
        extensions.set_step_source(lambda: self._step + 1)

    def _keys(self, config: HooksConfig) -> auth.CurveKeys | None:
        """CURVE keys of both sockets (mcinspect/auth.py): from the token, else fresh ones."""
        if not auth.curve_available():
            logger.warning("mcinspect: this libzmq lacks CURVE: other local users can connect to the inspector")
            return None
        return auth.keys_from_token(config.token) if config.token else auth.fresh_keys()

    def _publish_key(self, config: HooksConfig, keys: auth.CurveKeys | None) -> None:
        """Without a token, leave the public key where this user's clients find it."""
        if keys is None or config.token:
            return
        auth.write_key_file(self.port, keys)
        atexit.register(auth.remove_key_file, self.port, keys)

    def on_step(self, scheduler: Any, batch: Any) -> None:
        """After `process_batch_result`: capture, number and publish this step's delta, or,
        with nobody watching, only count the step (the usual path: kept short, it runs right
        after the forward, when little of mcinspect is in the CPU's caches). The request and
        publisher threads rest meanwhile (step_gate.py), and the GC waits for its end (gc_pause.py)."""
        paused = gc_pause.pause()
        self.gate.close()
        try:
            self._on_step(scheduler, batch)
        finally:
            self.gate.open()
            if paused:
                gc_pause.resume()

    def _on_step(self, scheduler: Any, batch: Any) -> None:
        self._step += 1
        sink = self.sink
        self.verifier.on_turn(Step(self._step), idle=False)
        if self._step % SAMPLE_EVERY == 0:
            self.stats.sample(scheduler.running_batch.reqs)
            self.server.ensure_serving()
        if sink.observed:  # planned at the previous boundary: its hooks kept evidence
            step = Step(self._step)
            if not self._capture(scheduler, batch, step, sink.drain(step)):
                self._unobserved += 1  # its events are gone, as in a step nobody watched
        else:
            self._unobserved += 1
            if self._wanted.is_set() or self.capture.catching_up:
                self._capture(scheduler, batch, Step(self._step), [])
        self._plan_next_step()

    def _plan_next_step(self) -> None:
        """Whether the step starting now will be captured at its end (its hooks keep evidence)."""
        publisher = self.publisher
        if not publisher.watched:
            self.sink.observed = self.every_step
        else:
            self.sink.observed = self.every_step or publisher.every_step or self.cadence.due_next(time.perf_counter(), self.errors.seconds)

    def on_idle(self, scheduler: Any) -> None:
        """After `Scheduler.on_idle` (no batch to run): catch up if a snapshot request waits,
        or for subscribers when the live stream's cadence allows; first, a verification turn.
        A subscriber that joined while the engine idled gets the next step's events too."""
        with gc_pause.paused():
            self._on_idle(scheduler)

    def _on_idle(self, scheduler: Any) -> None:
        self.verifier.on_turn(Step(self._step), idle=True)
        if not self.sink.observed:
            self._plan_next_step()
        news = self.verifier.has_news()  # results of references run while idle: stream them
        if self._captured_step >= self._step and not news:
            return
        due = news or self.cadence.idle_due(time.perf_counter(), self.errors.seconds)
        if self._wanted.is_set() or self.capture.catching_up or (self.publisher.watched and due):
            step = Step(self._step)
            self._capture(scheduler, None, step, self.sink.drain(step))

    def _start_verify(self, request: StartVerify) -> Reply:
        try:
            return self.verifier.start(list(request.nodes), request.all)
        except VerifyUnavailable as exc:
            return ErrorReply(schema_version=SCHEMA_VERSION, reason=str(exc))

    def _get_verify(self, request: GetVerify) -> Reply:
        try:
            return self.verifier.status(request.ticket)
        except VerifyUnavailable as exc:
            return ErrorReply(schema_version=SCHEMA_VERSION, reason=str(exc))

    def _capture(self, scheduler: Any, batch: Any, step: Step, events: list[Event]) -> bool:
        """Capture and publish `step`; False when a catch-up still runs (nothing published)."""
        began = time.perf_counter()
        reads = self.capture.free_list_reads
        with self._lock:  # snapshots and stats replies read the same state on the request thread
            parts = self.capture.step(step, batch)
            if self.capture.free_list_reads != reads:  # slots taken or given back: a peak can only be here
                self.stats.sample(None)
            if parts is None:  # a catch-up spread over steps (catch_up.py): this step is not published
                return False
            owners = self.capture.tree_owners()
            contents, dropped = self.contents.capture(step, owners, self.capture.owner_changes)
            contents, dropped = self.verifier.after_capture(contents, dropped, owners)
            events = events + self.verifier.take_events()
            self._seq += 1
            delta = parts.to_delta(
                seq=Seq(self._seq), step=step, events=events, counters=self.counters(), contents=contents, removed_contents=dropped
            )
            if self.self_check is not None:
                self.self_check.after_step(self.capture, scheduler, step, batch)
            self._captured_step = int(step)
        self.publisher.publish(delta)
        self.cadence.captured(began, time.perf_counter())
        if self._wanted.is_set():
            self._wanted.clear()
            with self._fresh:
                self._fresh.notify_all()
        return True

    @property
    def step(self) -> int:
        """The last step boundary seen, captured or not (0: only the initial full state)."""
        return self._step

    def counters(self) -> Counters:
        return Counters(
            published=self.publisher.published,
            dropped=self.publisher.dropped + self.sink.dropped_events,
            hook_errors=self.errors.total,
            rejected_requests=self.server.rejected,
            unobserved_steps=self._unobserved,
        )

    def snapshot(self) -> SnapshotParts:
        """A consistent full state (request thread): freezes it under the lock; the server
        encodes it outside, from the frozen shards (published_state.SnapshotParts). Steps went
        uncaptured: first asks the scheduler to catch up (at most every SNAPSHOT_CATCH_UP_S),
        and waits a little. Nothing captured since the last snapshot: the same object again
        (the server sends its encoding again)."""
        target = self._step
        now = time.monotonic()
        news = self.verifier.has_news()
        if (self._captured_step < target or news) and (news or now - self._caught_up_at >= SNAPSHOT_CATCH_UP_S):
            self._caught_up_at = now
            with self._fresh:
                self._wanted.set()
                self._fresh.wait_for(lambda: self._captured_step >= target and not self.verifier.has_news(), timeout=SNAPSHOT_WAIT_S)
        last = self._last_snapshot
        if last is not None and last.seq == self._seq:
            return last
        self._last_snapshot = self._take_snapshot()
        return self._last_snapshot

    def _take_snapshot(self) -> SnapshotParts:
        with self._lock:  # O(shards): the state's shards are frozen (cow_map.py), not copied
            published = self.capture.published()
            contents = self.contents.frozen()
            verified = self.verifier.overlay(contents)
            seq = self._seq
        # The contents copied here, a shard at a time with rests: the scheduler thread neither
        # waits for the lock nor for one long GIL hold (a 100k-entry dict copy is ms in one call).
        merged = contents.to_dict()
        merged.update(verified)
        return SnapshotParts(seq=Seq(seq), published=published, contents=merged, counters=self.counters())

    def stats_reply(self) -> Stats:
        with self._lock:
            return self._stats_reply()

    def _stats_reply(self) -> Stats:
        stats = self.stats.snapshot(self._step, self.errors.total)
        check = self.self_check
        return msgspec.structs.replace(
            stats,
            counters=self.counters(),
            self_check_steps=check.steps if check else 0,
            self_check_failures=check.failures if check else 0,
            self_check_first_failure=check.first_failure if check else "",
            hook_seconds=self.errors.seconds,
            verify=self.verifier.stats(),
            paths=dict(self.state_log.paths),
            request_seconds=self.server.busy_seconds,
            next_step_observed=self.sink.observed,
        )


def engine_info(scheduler: Any, port: int, stream_port: int, full_detail: bool, placement: Placement) -> EngineInfo:
    """The engine's configuration as this scheduler process sees it."""
    import sglang

    args = scheduler.server_args
    pool = scheduler.req_to_token_pool
    mamba_pool = getattr(pool, "mamba_pool", None)
    tree_core = getattr(scheduler.tree_cache, "tree_core", None)
    hf_config = getattr(getattr(scheduler, "model_config", None), "hf_config", None)
    family = family_of_architecture((getattr(hf_config, "architectures", None) or [""])[0])
    return EngineInfo(
        schema_version=SCHEMA_VERSION,
        sglang_version=sglang.__version__,
        model_path=str(args.model_path),
        strategy=str(getattr(args, strategy_field(args))),
        page_size=int(scheduler.page_size),
        overlap=bool(scheduler.enable_overlap),
        tree_core=type(tree_core).__name__ if tree_core is not None else type(scheduler.tree_cache).__name__,
        full_tree_detail=full_detail,
        mamba_pool_size=int(mamba_pool.size) if mamba_pool is not None else 0,
        kv_pool_tokens=int(scheduler.max_total_num_tokens),
        tp_rank=placement.tp_rank,
        dp_rank=placement.dp_rank,
        pid=os.getpid(),
        request_port=port,
        stream_port=stream_port,
        model_family=family.name if family is not None else "",
        state_layout=family.state_layout if family is not None else "",
        **state_shapes(mamba_pool),
        **placement_fields(placement),
    )


def state_shapes(mamba_pool: Any) -> dict[str, Any]:
    """EngineInfo's conv / temporal shapes, dtypes and bytes of one slot, from the live pool."""
    cache = getattr(mamba_pool, "mamba_cache", None)
    if cache is None:
        return {}
    one_slot = [t[:, 0] for t in (*cache.conv, cache.temporal)]  # [layers, size + 1, ...] -> [layers, ...]
    return dict(
        conv_shapes=tuple(tuple(t.shape) for t in one_slot[:-1]),
        conv_dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in one_slot[:-1]),
        temporal_shape=tuple(one_slot[-1].shape),
        temporal_dtype=str(one_slot[-1].dtype).removeprefix("torch."),
        state_bytes_per_slot=slot_bytes([*cache.conv, cache.temporal]),
    )


def _decode_graphs(scheduler: Any) -> bool:
    """Whether decode forwards replay CUDA graphs (their track copies run inside the graph)."""
    args = scheduler.server_args
    return str(getattr(scheduler, "device", "cpu")) != "cpu" and not getattr(args, "disable_cuda_graph", True)
