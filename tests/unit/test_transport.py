"""The transport, both ends, over real sockets on 127.0.0.1.

The engine side here is the real Publisher and RequestServer fed with synthetic schema structs
(random but consistent deltas); the client side is the real Session. What is checked: a session
reproduces the engine's state exactly, at the end and at every frame it still holds, whatever
happens on the way (late join, stalls, drops, a killed client, an engine that goes away).
"""

from __future__ import annotations

import errno
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import msgspec
import pytest
import zmq

from mcinspect.client import EngineRefused, EngineUnreachable, request
from mcinspect.schema import (
    INLINE_TOKENS,
    MAX_REQUEST_BYTES,
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    EngineInfo,
    ErrorReply,
    GetHistory,
    Hello,
    InsertEvent,
    KvEdit,
    KvState,
    NodeId,
    NodeRecord,
    RequestGrowth,
    RequestRecord,
    Rid,
    SlotClaim,
    SlotContent,
    SlotEvent,
    SlotId,
    Snapshot,
    Stats,
    Step,
    apply_delta,
    encoder,
    reply_decoder,
)
from mcinspect.session import Session
from mcinspect.target import Target
from mcinspect_engine_hooks.publisher import Publisher
from mcinspect_engine_hooks.server import HARD_LIMIT_BYTES, RequestServer

import factory
from waiting import until

SLOTS = 16
NODE_IDS = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _copy(state: CacheState) -> CacheState:
    return CacheState(
        step=state.step,
        nodes=dict(state.nodes),
        slots=dict(state.slots),
        requests=dict(state.requests),
        kv=state.kv,
        contents=dict(state.contents),
    )


def _initial_state() -> CacheState:
    slots = {SlotId(s): [SlotClaim(slot=SlotId(s), kind="free")] for s in range(1, SLOTS + 1)}
    return CacheState(step=Step(0), nodes={}, slots=slots, requests={}, kv=KvState(page_size=16, size=1024, free_runs=[(0, 1024)]))


def _node(rng: random.Random, node_id: int, tokens: int) -> NodeRecord:
    return factory.node(
        node_id, rng.randrange(-1, node_id), rng.randrange(512), tokens,
        tokens=rng.randbytes(4 * tokens), key_hash=rng.getrandbits(64),
        kv_runs=[(rng.randrange(1024), rng.randrange(1, 64))], kv_evicted=rng.random() < 0.1,
        mamba_slot=SlotId(rng.randrange(-1, SLOTS + 1)), full_lock=rng.randrange(3), mamba_lock=rng.randrange(3),
        in_full_lru=True, in_mamba_lru=rng.random() < 0.5, evictable=rng.random() < 0.5, last_access=rng.random(),
        hit_count=rng.randrange(10), tombstone=rng.random() < 0.1,
    )  # fmt: skip


def _request(rng: random.Random, rid: str) -> RequestRecord:
    return RequestRecord(
        rid=Rid(rid), state=rng.choice(["waiting", "running", "chunked"]), row=rng.randrange(8), prompt_len=rng.randrange(200),
        output_len=rng.randrange(50), prefix_len=0, cache_protected_len=0, committed_len=0, allocated_len=0,
        last_node=NodeId(-1), working_slot=SlotId(rng.randrange(1, SLOTS + 1)), ping_pong=[], ping_pong_empty=[],
        next_track_idx=0, last_track_idx=-1, last_track_seqlen=-1, prev_track_seqlen=-1, cow_source=SlotId(-1),
        needs_clear=False, kv_runs=[(0, rng.randrange(1, 100))],
    )  # fmt: skip


_POOLS: dict[int, list[NodeRecord]] = {}


def _node_pool(tokens: int) -> list[NodeRecord]:
    """Node records to draw from: drawing is cheap, making 200k random records is not."""
    if tokens not in _POOLS:
        rng = random.Random(tokens)
        _POOLS[tokens] = [_node(rng, node_id, tokens) for node_id in range(NODE_IDS) for _ in range(8)]
    return _POOLS[tokens]


def _random_delta(rng: random.Random, state: CacheState, seq: int, *, nodes: int = 3, tokens: int = 8) -> Delta:
    """A delta that changes a bit of everything, consistent with `state`."""
    step = state.step + 1
    pool = _node_pool(tokens)
    upserts = [pool[rng.randrange(len(pool))] for _ in range(nodes)]
    upserted = {n.id for n in upserts}
    removable = [k for k in state.nodes if k not in upserted]
    slot = SlotId(rng.randrange(1, SLOTS + 1))
    claim = SlotClaim(slot=slot, kind=rng.choice(["free", "tree", "working", "ping_pong"]), node=NodeId(rng.randrange(NODE_IDS)))
    rid = f"r{rng.randrange(10)}"
    upsert_requests = [_request(rng, rid)] if rng.random() < 0.5 else []
    removed_requests = [Rid(rid)] if rng.random() < 0.2 and rid in state.requests else []
    growing = [r for r in state.requests.values() if r.rid != rid and rng.random() < 0.5]
    grown = [
        RequestGrowth(
            r.rid,
            r.output_len + 1,
            r.committed_len + 1,
            r.allocated_len + 1,
            [(r.kv_runs[-1][0] + r.kv_runs[-1][1], 1)] if r.kv_runs else [],
        )
        for r in growing
    ]
    kv = KvState(page_size=16, size=1024, free_runs=[(0, rng.randrange(1024))]) if rng.random() < 0.3 else None
    return Delta(
        schema_version=SCHEMA_VERSION, seq=seq, step=Step(step), upsert_nodes=upserts,
        removed_nodes=rng.sample(removable, min(1, len(removable))), slots={slot: [claim]},
        upsert_requests=upsert_requests, removed_requests=removed_requests, grown_requests=grown,
        kv=kv, kv_edit=_kv_edit(rng, state.kv) if kv is None and rng.random() < 0.5 else None,
        events=[SlotEvent(step=Step(step), slots=[slot], allocated=True), InsertEvent(step=Step(step), rid=Rid(rid), node=upserts[0].id, slot=slot, seqlen=8, ping_pong_index=-1)],
        counters=Counters(published=seq - 1),
        contents={slot: SlotContent(slot=slot, fingerprint=rng.getrandbits(64), nonfinite=0, zero=False, step=Step(step))},
    )  # fmt: skip


def _kv_edit(rng: random.Random, kv: KvState) -> KvEdit:
    """An edit that fits `kv`: a first token taken from a free run, a token past every run put back."""
    taken = [(kv.free_runs[0][0], 1)] if kv.free_runs and kv.free_runs[0][1] > 0 and rng.random() < 0.7 else []
    last = kv.free_runs[-1] if kv.free_runs else (0, 0)
    end = last[0] + last[1]
    given = [(end + 1, 1)] if end + 1 < kv.size and rng.random() < 0.7 else []
    return KvEdit(removed=taken, added=given)


class _Engine:
    """The engine side of the wire: a state, its seq, the real publisher and request server."""

    def __init__(
        self, *, seed: int = 0, pid: int = 1, request_port: int = 0, stream_port: int = 0, start: bool = True,
        record: bool = True, **publisher_args: int,
    ) -> None:  # fmt: skip
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.state = _initial_state()
        self.seq = 0
        self.states = {0: _copy(self.state)} if record else None
        """The state after each seq, to check a session's time travel against."""
        self.publisher = Publisher("127.0.0.1", stream_port, **publisher_args)
        request_port = request_port or _free_port()
        self.info = EngineInfo(
            schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="m", strategy="extra_buffer", page_size=16,
            overlap=True, tree_core="RustUnifiedTreeCore", full_tree_detail=False, mamba_pool_size=SLOTS, kv_pool_tokens=1024,
            tp_rank=0, dp_rank=0, pid=pid, request_port=request_port, stream_port=self.publisher.port,
        )  # fmt: skip
        try:
            self.server = RequestServer(
                "127.0.0.1", request_port, token="", info=self.info, snapshot=self.snapshot,
                history=self.publisher.history_after, stats=self.stats,
            )  # fmt: skip
        except zmq.ZMQError:
            self.publisher.close()
            raise
        self.server.start()
        if start:
            self.publisher.start()

    @property
    def target(self) -> Target:
        return Target("127.0.0.1", self.info.request_port)

    def make(self, count: int, **delta_args: int) -> list[Delta]:
        """`count` deltas following the current state (applied later by `publish`)."""
        scratch, deltas = _copy(self.state), []
        for i in range(count):
            deltas.append(_random_delta(self.rng, scratch, self.seq + i + 1, **delta_args))
            apply_delta(scratch, deltas[-1])
        return deltas

    def publish(self, delta: Delta) -> None:
        """What the inspector does at a step boundary: apply, then publish under the same lock."""
        with self.lock:
            apply_delta(self.state, delta)
            self.seq = delta.seq
            self.publisher.publish(delta)
            if self.states is not None:
                self.states[delta.seq] = _copy(self.state)

    def step(self, count: int = 1) -> None:
        for delta in self.make(count):
            self.publish(delta)

    def snapshot(self) -> Snapshot:
        with self.lock:
            return Snapshot(schema_version=SCHEMA_VERSION, seq=self.seq, state=_copy(self.state), counters=Counters(published=self.seq))

    def stats(self) -> Stats:
        return Stats(schema_version=SCHEMA_VERSION, step=self.state.step, mamba_pool_size=SLOTS, mamba_slots_in_use=0,
                     mamba_slots_peak=0, evicted_mamba_slots=0, evicted_tokens=0, hook_errors=0,
                     slots_per_request={}, example_layouts=[])  # fmt: skip

    def close(self) -> None:
        self.publisher.close()
        self.server.close()


def _follow(session: Session, engine: _Engine, timeout_s: float = 10.0) -> None:
    """Poll until the session has reached the engine's last seq."""
    assert until(lambda: session.counters().last_seq >= engine.seq, timeout_s, lambda: session.poll(0.05)), session.counters()


def _assert_time_travel(session: Session, engine: _Engine, after_index: int = -1) -> None:
    """Every frame the session still holds (past `after_index`) is the engine's state at its seq,
    and each frame's stream delta (none for a resync) moves the frame before it there."""
    assert engine.states is not None
    frames = [f for f in session.history() if f.index > after_index]
    assert frames
    for before, frame in zip([None, *frames], frames):
        assert session.state_at(frame.index) == engine.states[frame.seq], frame
        delta = session.delta_at(frame.index)
        assert (delta is None) == frame.resync, frame
        if delta is not None and before is not None:
            state = session.state_at(before.index)
            apply_delta(state, delta)
            assert delta.seq == frame.seq and state == engine.states[frame.seq], frame


def _eventually_bound(make: Callable[[], _Engine], timeout_s: float = 2.0) -> _Engine:
    """ZMQ releases a closed socket's port shortly after close(), on its I/O thread."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return make()
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))  # native threads too (ZMQ's I/O threads)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def engine() -> _Engine:
    engine = _Engine()
    yield engine
    engine.close()


def test_replaying_the_stream_reproduces_every_state(engine: _Engine) -> None:
    events = {}
    with Session(engine.target, timeout_s=2, history_size=64, keyframe_every=5) as session:
        session.connect()
        for delta in engine.make(300):
            engine.publish(delta)
            events[delta.seq] = tuple(delta.events)
        _follow(session, engine)
        latest = session.latest()
        assert latest is not None and latest.state == engine.state and latest.info.seq == 300
        frames = session.history()
        assert len(frames) == 64 and frames[-1].seq == 300  # bounded: older frames left
        _assert_time_travel(session, engine)  # through keyframes rolled forward on eviction
        assert all(frame.resync or frame.events == events[frame.seq] for frame in frames)
        counters = session.counters()
        assert counters.deltas_applied + counters.resyncs >= 300 - 1 and counters.bad_frames == 0


def test_two_sessions_at_once(engine: _Engine) -> None:
    sessions = [Session(engine.target, timeout_s=2) for _ in range(2)]
    updates = [0, 0]
    for i, session in enumerate(sessions):
        session.connect()
        session.start_reader(lambda result, i=i: updates.__setitem__(i, updates[i] + result.new_frames))
    engine.step(200)
    for session in sessions:
        assert until(lambda session=session: session.counters().last_seq == 200, 10)
        assert session.latest().state == engine.state
        session.close()
    assert all(u > 0 for u in updates)


def test_a_session_that_joins_mid_stream(engine: _Engine) -> None:
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            engine.step(5)
            time.sleep(0.002)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert until(lambda: engine.seq >= 100, 10)
        session = Session(engine.target, timeout_s=2)
        session.connect()
        session.start_reader()
        time.sleep(0.3)
    finally:
        stop.set()
        producer.join()
    assert until(lambda: session.counters().last_seq == engine.seq, 10), session.counters()
    assert session.latest().state == engine.state
    first = session.history()[0]
    assert first.resync and first.seq >= 100
    session.close()


def test_a_killed_session_leaves_nothing_behind(engine: _Engine) -> None:
    engine.step(10)
    threads, fds = _threads(), _fds()
    code = (
        "import sys; from mcinspect.session import Session; from mcinspect.target import Target\n"
        f"s = Session(Target('127.0.0.1', {engine.info.request_port})); s.connect(); print('ready', flush=True)\n"
        "while True: s.poll(0.1)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env={**os.environ})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
        assert until(lambda: engine.publisher.watched, 5)
        engine.step(100)
        child.send_signal(signal.SIGKILL)
        child.wait(5)
        assert until(lambda: not engine.publisher.watched, 5)  # a dead subscriber is noticed
        published = engine.publisher.published
        engine.step(100)  # the publisher keeps going after its subscriber died mid-stream
        assert until(lambda: engine.publisher.published >= published + 100, 5)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert until(lambda: _fds() <= fds and _threads() <= threads, 5), (fds, _fds(), threads, _threads())
    with Session(engine.target, timeout_s=2) as session:  # and still serves a new client
        session.connect()
        assert session.latest().state == engine.state


def test_watched_while_any_session_is_subscribed(engine: _Engine) -> None:
    """What lets the inspector skip capture when nobody watches (inspector.py)."""
    assert not engine.publisher.watched
    first, second = Session(engine.target, timeout_s=2), Session(engine.target, timeout_s=2)
    first.connect()
    assert until(lambda: engine.publisher.watched, 5)
    second.connect()
    first.close()
    time.sleep(0.3)
    assert engine.publisher.watched  # the second one still is
    second.close()
    assert until(lambda: not engine.publisher.watched, 5)


def test_every_step_while_any_session_asks_for_it(engine: _Engine) -> None:
    """A live view alone leaves the inspector to its time budget; a recorder or checker
    (every_step, the default) makes it capture every step until it leaves."""
    live = Session(engine.target, timeout_s=2, every_step=False)
    live.connect()
    assert until(lambda: engine.publisher.watched, 5)
    time.sleep(0.3)
    assert not engine.publisher.every_step
    with Session(engine.target, timeout_s=2) as recorder:
        recorder.connect()
        assert until(lambda: engine.publisher.every_step, 5)
        engine.step(5)
        _follow(live, engine)  # the marker topic takes nothing from the stream
        _follow(recorder, engine)
        assert live.latest().state == recorder.latest().state == engine.state
    assert until(lambda: not engine.publisher.every_step, 5)
    assert engine.publisher.watched  # the live view still is
    live.close()
    assert until(lambda: not engine.publisher.watched, 5)


def test_a_stalled_subscriber_never_slows_the_publisher() -> None:
    # Small bounds all along the way so the stall overflows them: per-subscriber HWMs of 50
    # messages, a history ring too short to fill the gap; ~4 kB deltas outgrow TCP's buffers.
    engine = _Engine(send_hwm=50, history_size=20, queue_size=100_000, record=False)
    chunk = 1500

    def publish_rate() -> float:
        """The loop's rate in its best window of 100 publishes: windows (~1 ms) short enough
        that some escape preemption on a shared CPU, while a publish that blocked would slow
        every window."""
        deltas = engine.make(chunk, nodes=24, tokens=INLINE_TOKENS)
        windows = []
        for start in range(0, chunk, 100):
            began = time.perf_counter()
            for delta in deltas[start : start + 100]:
                engine.publish(delta)
            windows.append(100 / (time.perf_counter() - began))
        assert until(lambda: engine.publisher.published >= engine.seq, 20)  # sender idle again
        return max(windows)

    try:
        alone = max(publish_rate() for _ in range(2))
        stalled = Session(engine.target, timeout_s=5, rcv_hwm=50)
        stalled.connect()
        with_stalled = max(publish_rate() for _ in range(4))  # ~24 MB the session never reads
        assert with_stalled >= 0.5 * alone, (alone, with_stalled)
        assert engine.publisher.dropped == 0  # the queue kept up; PUB dropped for the stalled one
        _follow(stalled, engine, timeout_s=20)
        assert stalled.latest().state == engine.state
        counters = stalled.counters()
        assert counters.gaps >= 1 and counters.resyncs >= 1, counters
        stalled.close()
    finally:
        engine.close()


def test_a_full_queue_drops_counts_and_the_session_recovers() -> None:
    engine = _Engine(queue_size=4, start=False)
    try:
        session = Session(engine.target, timeout_s=2)
        session.connect()
        engine.step(10)  # sender not started yet: 4 fit, 6 dropped
        assert engine.publisher.dropped == 6
        engine.publisher.start()
        assert until(lambda: engine.publisher.published == 4, 5)  # the queue is free again
        engine.step(1)
        assert until(lambda: engine.publisher.published == 5, 5)
        engine.step(9)
        _follow(session, engine)
        assert session.latest().state == engine.state
        counters = session.counters()
        assert counters.gaps >= 1 and counters.resyncs >= 1, counters
        _assert_time_travel(session, engine)  # across the resync, stored as a diff
        session.close()
    finally:
        engine.close()


class _LossyRelay:
    """A stream relay that loses chosen seqs, as a lossy network or a slow subscriber would."""

    def __init__(self, upstream_port: int, lose: Callable[[int], bool]) -> None:
        context = zmq.Context.instance()
        self._sub = context.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.connect(f"tcp://127.0.0.1:{upstream_port}")
        self._pub = context.socket(zmq.PUB)
        self.port = self._pub.bind_to_random_port("tcp://127.0.0.1")
        self._lose = lose
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._sub.poll(50):
                frames = self._sub.recv_multipart()
                if not self._lose(int.from_bytes(frames[1], "big")):
                    self._pub.send_multipart(frames)
        self._sub.close(linger=0)
        self._pub.close(linger=0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def test_gaps_are_filled_from_the_history_ring(engine: _Engine) -> None:
    relay = _LossyRelay(engine.publisher.port, lose=lambda seq: seq % 7 == 0)
    engine.server.info = msgspec.structs.replace(engine.info, stream_port=relay.port)
    try:
        with Session(engine.target, timeout_s=2) as session:
            session.connect()
            for _ in range(10):  # paced, so each loss is seen as its own gap
                engine.step(10)
                _follow(session, engine)
            assert session.latest().state == engine.state
            counters = session.counters()
            assert counters.gaps >= 10 and counters.history_fills == counters.gaps and counters.resyncs == 0, counters
        reply = request(engine.target, GetHistory(schema_version=SCHEMA_VERSION, after_seq=95))
        assert [d.seq for d in reply.deltas] == [96, 97, 98, 99, 100] and reply.oldest_seq == 1
    finally:
        relay.close()


def test_a_lost_last_delta_is_found_by_the_heartbeat(engine: _Engine) -> None:
    relay = _LossyRelay(engine.publisher.port, lose=lambda seq: seq > 3)  # nothing after it reveals it
    engine.server.info = msgspec.structs.replace(engine.info, stream_port=relay.port)
    try:
        with Session(engine.target, timeout_s=2, heartbeat_s=0.2) as session:
            session.connect()
            engine.step(5)
            _follow(session, engine, timeout_s=5)
            assert session.latest().state == engine.state and session.counters().history_fills >= 1
    finally:
        relay.close()


def _malformed(rng: random.Random) -> list[tuple[str, list[bytes]]]:
    """1,000 bad requests, each answered with an ErrorReply."""
    good = encoder.encode(Hello(schema_version=SCHEMA_VERSION))
    makers: list[tuple[str, Callable[[], list[bytes]]]] = [
        ("random bytes", lambda: [rng.randbytes(rng.randrange(0, 2000))]),
        ("empty", lambda: [b""]),
        ("wrong version", lambda: [encoder.encode(Hello(schema_version=rng.choice([0, 1, SCHEMA_VERSION + 1, -5, 2**40])))]),
        ("future struct", lambda: [encoder.encode({"type": "Hello", "schema_version": SCHEMA_VERSION + 1, "new": 1})]),
        (
            "wrong types",
            lambda: [
                encoder.encode(
                    rng.choice(
                        [
                            {"type": "Hello", "schema_version": str(SCHEMA_VERSION)},
                            {"type": "GetHistory", "schema_version": SCHEMA_VERSION, "after_seq": "x"},
                            {"type": "Hello", "schema_version": SCHEMA_VERSION, "token": 5},
                            [SCHEMA_VERSION],
                            12,
                            None,
                            {"schema_version": SCHEMA_VERSION},
                        ]
                    )
                )
            ],
        ),  # fmt: skip
        (
            "unknown tags",
            lambda: [
                encoder.encode(
                    rng.choice(
                        [
                            {"type": "Nope", "schema_version": SCHEMA_VERSION},
                            {"type": "Snapshot", "schema_version": SCHEMA_VERSION},
                            {"type": "ErrorReply", "schema_version": SCHEMA_VERSION, "reason": "x"},
                        ]
                    )
                )
            ],
        ),  # fmt: skip
        ("oversized", lambda: [good + b"\x00" * rng.randrange(MAX_REQUEST_BYTES, HARD_LIMIT_BYTES - len(good))]),
        ("extra frames", lambda: [good] + [rng.randbytes(10) for _ in range(rng.randrange(1, 5))]),
    ]
    return [(name, make()) for name, make in (makers[i % len(makers)] for i in range(1000))]


def test_the_request_socket_survives_1000_malformed_frames(engine: _Engine) -> None:
    threads, fds = _threads(), _fds()
    rng = random.Random(7)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(engine.target.address)
    bad = _malformed(rng)
    for start in range(0, len(bad), 50):  # in batches, so no queue on either side overflows
        for _, frames in bad[start : start + 50]:
            dealer.send_multipart(frames)
        for name, _ in bad[start : start + 50]:
            assert dealer.poll(5000), f"no answer to {name}"
            reply = reply_decoder.decode(dealer.recv())
            assert isinstance(reply, ErrorReply), name
    dealer.close()
    assert engine.server.rejected == 1000 and engine.server.errors == 0
    # Beyond ZMQ's hard limit the connection is cut before we read: no answer, nothing held.
    for _ in range(3):
        huge = zmq.Context.instance().socket(zmq.DEALER)
        huge.setsockopt(zmq.LINGER, 0)
        huge.connect(engine.target.address)
        huge.send(b"\x00" * (HARD_LIMIT_BYTES + 1))
        assert not huge.poll(300)
        huge.close()
    assert request(engine.target, Hello(schema_version=SCHEMA_VERSION)) == engine.info
    assert until(lambda: _fds() <= fds and _threads() <= threads, 5), (fds, _fds(), threads, _threads())


def test_an_engine_that_goes_away_and_comes_back() -> None:
    first = _Engine(seed=1, pid=1)
    ports = {"request_port": first.info.request_port, "stream_port": first.publisher.port}
    session = Session(first.target, timeout_s=0.5, heartbeat_s=0.2)
    session.connect()
    first.step(30)
    _follow(session, first)
    last_before = session.history()[-1]
    before = session.state_at(last_before.index)
    first.close()
    assert until(lambda: not session.counters().connected, 5, lambda: session.poll(0.05))
    assert session.latest().state == before  # what we had stays readable
    second = _eventually_bound(lambda: _Engine(seed=2, pid=2, **ports))  # restarted: new pid, seqs from 1
    try:
        second.step(10)
        assert until(lambda: session.connected, 5, lambda: session.poll(0.05)), session.counters()
        second.step(10)
        _follow(session, second)
        assert session.latest().state == second.state
        assert session.state_at(last_before.index) == before  # history kept across the restart
        _assert_time_travel(session, second, after_index=last_before.index)
        counters = session.counters()
        assert counters.disconnects == 1 and counters.connected and counters.last_seq == 20
    finally:
        session.close()
        second.close()


def test_unreachable_and_refused_engines_are_clear_errors(engine: _Engine) -> None:
    began = time.monotonic()
    with pytest.raises(EngineUnreachable, match="no answer"):
        Session(Target("127.0.0.1", _free_port()), timeout_s=0.3).connect()
    assert time.monotonic() - began < 3
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    newer = msgspec.structs.replace(engine.info, schema_version=SCHEMA_VERSION + 1)

    def answer_once() -> None:
        if router.poll(3000):
            identity, _ = router.recv_multipart()
            router.send_multipart([identity, encoder.encode(newer)])

    answering = threading.Thread(target=answer_once)
    answering.start()
    with pytest.raises(EngineRefused, match="schema"):
        Session(Target("127.0.0.1", port), timeout_s=2).connect()
    answering.join()
    router.close()
