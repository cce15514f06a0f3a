"""The request socket: answers what it knows, refuses the rest with a reason, never raises.

Wire-level abuse (1,000 malformed frames, oversized frames, leaks) is in test_transport.py.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable, Iterator

import msgspec
import pytest
import zmq
from sglang.srt.mem_cache.allocator.mamba import MambaSlotAllocator

from mcinspect.auth import keys_from_token
from mcinspect.client import EngineRefused, EngineUnreachable, Requester, request
from mcinspect.schema import (
    MAX_REQUEST_BYTES,
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    EngineInfo,
    ErrorReply,
    GetHistory,
    GetSnapshot,
    GetStats,
    Hello,
    History,
    KvState,
    Snapshot,
    Stats,
    Step,
    encoder,
    reply_decoder,
)
from mcinspect.target import Target
from mcinspect_engine_hooks.event_sink import EventSink
from mcinspect_engine_hooks.publisher import HistoryWindow
from mcinspect_engine_hooks.server import RequestServer
from mcinspect_engine_hooks.stats import StatsCollector


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _info(port: int) -> EngineInfo:
    return EngineInfo(
        schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="m", strategy="extra_buffer",
        page_size=16, overlap=True, tree_core="RustUnifiedTreeCore", full_tree_detail=False, mamba_pool_size=8,
        kv_pool_tokens=64, tp_rank=0, dp_rank=0, pid=1, request_port=port, stream_port=port + 1,
    )  # fmt: skip


SNAPSHOT = Snapshot(
    schema_version=SCHEMA_VERSION, seq=7, counters=Counters(published=7),
    state=CacheState(step=Step(7), nodes={}, slots={}, requests={}, kv=KvState(page_size=16, size=64, free_runs=[(0, 64)])),
)  # fmt: skip


def _delta(seq: int) -> Delta:
    return Delta(
        schema_version=SCHEMA_VERSION, seq=seq, step=Step(seq), upsert_nodes=[], removed_nodes=[], slots={},
        upsert_requests=[], removed_requests=[], kv=None, events=[], counters=Counters(published=seq),
    )  # fmt: skip


def _history(after_seq: int) -> HistoryWindow | None:
    """A ring holding seqs 5..7, as `Publisher.history_after` answers."""
    if after_seq + 1 < 5:
        return None
    return HistoryWindow(5, [encoder.encode(_delta(s)) for s in range(max(5, after_seq + 1), 8)])


@pytest.fixture
def make_server() -> Iterator[Callable[..., RequestServer]]:
    servers: list[RequestServer] = []

    def make(token: str = "", snapshot: Callable[[], Snapshot] = lambda: SNAPSHOT) -> RequestServer:
        port = _free_port()
        server = RequestServer(
            "127.0.0.1", port, token=token, info=_info(port), snapshot=snapshot, history=_history,
            stats=lambda: StatsCollector(MambaSlotAllocator(8, "cpu"), EventSink()).snapshot(step=1, hook_errors=3),
            keys=keys_from_token(token) if token else None,  # as the inspector does: a token keys CURVE
        )  # fmt: skip
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def _target(server: RequestServer) -> Target:
    return Target("127.0.0.1", server.port)


def test_every_request_is_answered_over_zmq(make_server: Callable[..., RequestServer]) -> None:
    server = make_server()
    assert request(_target(server), Hello(schema_version=SCHEMA_VERSION)) == server.info
    stats = request(_target(server), GetStats(schema_version=SCHEMA_VERSION))
    assert isinstance(stats, Stats) and stats.hook_errors == 3 and stats.mamba_pool_size == 8
    assert request(_target(server), GetSnapshot(schema_version=SCHEMA_VERSION)) == SNAPSHOT
    history = request(_target(server), GetHistory(schema_version=SCHEMA_VERSION, after_seq=5))
    assert isinstance(history, History) and history.deltas == [_delta(6), _delta(7)] and history.oldest_seq == 5
    assert server.rejected == 0


def test_history_older_than_the_ring_asks_for_a_snapshot(make_server: Callable[..., RequestServer]) -> None:
    server = make_server()
    assert request(_target(server), GetHistory(schema_version=SCHEMA_VERSION, after_seq=4)).deltas[0].seq == 5
    with pytest.raises(EngineRefused, match="take a snapshot"):
        request(_target(server), GetHistory(schema_version=SCHEMA_VERSION, after_seq=3))
    assert request(_target(server), GetHistory(schema_version=SCHEMA_VERSION, after_seq=9)).deltas == []
    assert server.rejected == 0  # a valid request with a negative answer is not a rejection


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"\x00\xff garbage", "malformed"),
        (b"", "malformed"),
        (encoder.encode({"type": "Hello"}), "malformed"),  # required field missing
        (encoder.encode({"type": "Nope", "schema_version": SCHEMA_VERSION}), "malformed"),
        (encoder.encode({"type": "Hello", "schema_version": "1"}), "malformed"),  # wrong type
        (encoder.encode(SNAPSHOT), "malformed"),  # a reply is not a request
        (encoder.encode(Hello(schema_version=SCHEMA_VERSION + 1)), "schema version"),
        # A future client's request that this schema cannot even decode: still named by version.
        (encoder.encode({"type": "Hello", "schema_version": SCHEMA_VERSION + 1, "new_field": 1}), "schema version"),
        (encoder.encode(Hello(schema_version=SCHEMA_VERSION, token="x" * MAX_REQUEST_BYTES)), "exceeds"),
    ],
)
def test_bad_requests_get_an_error_reply(make_server: Callable[..., RequestServer], payload: bytes, reason: str) -> None:
    server = make_server()
    reply = server.answer(payload)
    assert isinstance(reply, ErrorReply) and reason in reply.reason
    assert server.rejected == 1


def test_a_token_keys_curve_and_is_checked_too(make_server: Callable[..., RequestServer]) -> None:
    server = make_server(token="s3cret")
    # Without the token's key the CURVE handshake never completes: no byte reaches the server.
    with pytest.raises(EngineUnreachable, match="MCINSPECT_TOKEN"):
        request(_target(server), Hello(schema_version=SCHEMA_VERSION), timeout_s=0.5)
    with pytest.raises(EngineUnreachable):  # non-ASCII: another key, no crash
        request(_target(server), GetSnapshot(schema_version=SCHEMA_VERSION, token="s3crét"), timeout_s=0.5)
    assert request(_target(server), Hello(schema_version=SCHEMA_VERSION, token="s3cret")) == server.info
    assert server.rejected == 0
    # Past CURVE, the request's own token is still compared (as bytes).
    requester = Requester(_target(server), token="s3cret")
    try:
        requester.send(Hello(schema_version=SCHEMA_VERSION, token="s3crét"))
        assert requester.socket.poll(5000)
        with pytest.raises(EngineRefused, match="bad or missing token"):
            requester.receive()
    finally:
        requester.close()
    assert server.rejected == 1


def test_a_failing_callable_is_an_error_reply_not_a_dead_server(make_server: Callable[..., RequestServer]) -> None:
    def broken() -> Snapshot:
        raise RuntimeError("adapter bug")

    server = make_server(snapshot=broken)
    with pytest.raises(EngineRefused, match="GetSnapshot failed inside mcinspect: adapter bug"):
        request(_target(server), GetSnapshot(schema_version=SCHEMA_VERSION))
    assert server.errors == 1 and server.rejected == 0
    assert request(_target(server), Hello(schema_version=SCHEMA_VERSION)) == server.info


def _rebind(port: int, info: EngineInfo, timeout_s: float = 2.0) -> RequestServer:
    """ZMQ releases a closed socket's port shortly after close(), on its I/O thread."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return RequestServer(
                "127.0.0.1", port, token="", info=info, snapshot=lambda: SNAPSHOT, history=_history,
                stats=lambda: StatsCollector(MambaSlotAllocator(8, "cpu"), EventSink()).snapshot(step=1, hook_errors=0),
            )  # fmt: skip
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_close_stops_the_thread_and_frees_the_port(make_server: Callable[..., RequestServer]) -> None:
    server = make_server()
    server.close()
    assert not server._thread.is_alive()  # noqa: SLF001
    again = _rebind(server.port, server.info)
    again.start()
    assert request(_target(again), Hello(schema_version=SCHEMA_VERSION)) == server.info
    again.close()


def test_nothing_listening_is_a_bounded_wait() -> None:
    began = time.monotonic()
    with pytest.raises(EngineUnreachable, match="no answer"):
        request(Target("127.0.0.1", _free_port()), Hello(schema_version=SCHEMA_VERSION), timeout_s=0.5)
    assert time.monotonic() - began < 3


def test_schema_round_trips_through_msgpack() -> None:
    info = _info(7000)
    assert reply_decoder.decode(encoder.encode(info)) == info
    assert msgspec.json.decode(msgspec.json.encode(info), type=EngineInfo) == info
