"""The request socket under hostile input (issue 14): it never dies, never holds much, never
lets one client take the engine's time; clients never trust what answers them."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import msgspec
import pytest
import zmq
from sglang.srt.mem_cache.allocator.mamba import MambaSlotAllocator

from mcinspect.client import EngineRefused, check_reply, request
from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    EngineInfo,
    ErrorReply,
    GetSnapshot,
    Hello,
    KvState,
    Snapshot,
    Step,
    encoder,
    reply_decoder,
)
from mcinspect.target import Target
from mcinspect_engine_hooks.event_sink import EventSink
from mcinspect_engine_hooks.publisher import HistoryWindow
from mcinspect_engine_hooks.request_budget import ClientRates, TimeShare
from mcinspect_engine_hooks.server import RequestServer
from mcinspect_engine_hooks.stats import StatsCollector

NESTED = 50_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _info(port: int) -> EngineInfo:
    return EngineInfo(
        schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="m", strategy="extra_buffer",
        page_size=16, overlap=True, tree_core="UnifiedTreeCore", full_tree_detail=True, mamba_pool_size=8,
        kv_pool_tokens=64, tp_rank=0, dp_rank=0, pid=1, request_port=port, stream_port=port + 1,
    )  # fmt: skip


def _snapshot(seq: int) -> Snapshot:
    return Snapshot(
        schema_version=SCHEMA_VERSION, seq=seq, counters=Counters(published=seq),
        state=CacheState(step=Step(seq), nodes={}, slots={}, requests={}, kv=KvState(page_size=16, size=64, free_runs=[(0, 64)])),
    )  # fmt: skip


@pytest.fixture
def make_server() -> Iterator[Callable[..., RequestServer]]:
    servers: list[RequestServer] = []

    def make(snapshot: Callable[[], Snapshot] = lambda: _snapshot(7), **limits: object) -> RequestServer:
        port = _free_port()
        server = RequestServer(
            "127.0.0.1", port, token="", info=_info(port), snapshot=snapshot, history=lambda seq: HistoryWindow(seq + 1, []),
            stats=lambda: StatsCollector(MambaSlotAllocator(8, "cpu"), EventSink()).snapshot(step=1, hook_errors=0),
            **limits,  # type: ignore[arg-type]
        )  # fmt: skip
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def _dealer(server: RequestServer) -> zmq.Socket:
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://127.0.0.1:{server.port}")
    return dealer


def _nested_in_token(levels: int, tag_last: bool) -> bytes:
    """A Hello whose token is `levels` nested one-element arrays (~1 byte a level)."""
    nested = b"\x91" * levels + b"\x00"
    fields = [encoder.encode("schema_version") + encoder.encode(SCHEMA_VERSION), encoder.encode("token") + nested]
    tag = encoder.encode("type") + encoder.encode("Hello")
    return b"\x83" + b"".join([*fields, tag] if tag_last else [tag, *fields])


@pytest.mark.parametrize("tag_last", [False, True])
def test_deep_nesting_is_refused_and_the_server_lives(make_server: Callable[..., RequestServer], tag_last: bool) -> None:
    server = make_server()
    payload = _nested_in_token(NESTED, tag_last)
    assert 45_000 < len(payload) < 60_000
    dealer = _dealer(server)
    for _ in range(3):
        dealer.send(payload)
        assert dealer.poll(5000)
        reply = reply_decoder.decode(dealer.recv())
        assert isinstance(reply, ErrorReply) and "nested deeper" in reply.reason
    dealer.close()
    # The attack killed the thread: every later request went unanswered.
    assert request(Target("127.0.0.1", server.port), Hello(schema_version=SCHEMA_VERSION)) == server.info
    assert server.rejected == 3 and server.errors == 0


def test_past_the_depth_scan_decoding_still_fails_safely(make_server: Callable[..., RequestServer]) -> None:
    server = make_server()
    shallow_enough = _nested_in_token(20, tag_last=True)  # within MAX_DEPTH: msgspec decides
    reply = server.answer(shallow_enough)
    assert isinstance(reply, ErrorReply) and "malformed" in reply.reason


def test_the_loop_survives_a_failure_and_a_dead_thread_is_restarted(make_server: Callable[..., RequestServer]) -> None:
    server = make_server()
    failing = {"left": 1}
    receive = server._receive  # noqa: SLF001

    def flaky() -> tuple[bytes, bytes | None]:
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("a bug in the loop")
        return receive()

    server._receive = flaky  # type: ignore[method-assign]  # noqa: SLF001
    target = Target("127.0.0.1", server.port)
    assert request(target, Hello(schema_version=SCHEMA_VERSION), timeout_s=5) == server.info
    assert server.errors == 1
    # A thread that stopped anyway (here: told to by hand) is started again by the inspector's check.
    server._stop.set()  # noqa: SLF001
    server._thread.join(2)  # noqa: SLF001
    server._stop.clear()  # noqa: SLF001
    server.ensure_serving()
    assert server.restarts == 1
    assert request(target, Hello(schema_version=SCHEMA_VERSION)) == server.info


def test_a_multipart_request_is_drained_and_refused(make_server: Callable[..., RequestServer]) -> None:
    server = make_server()
    dealer = _dealer(server)
    dealer.send_multipart([encoder.encode(Hello(schema_version=SCHEMA_VERSION))] + [b"\x00" * 1000] * 200)
    assert dealer.poll(5000)
    reply = reply_decoder.decode(dealer.recv())
    assert isinstance(reply, ErrorReply) and "exactly one frame" in reply.reason
    dealer.close()


def test_one_client_is_rate_limited_others_are_not(make_server: Callable[..., RequestServer]) -> None:
    server = make_server(rates=ClientRates(rate=5, burst=10))
    flood = _dealer(server)
    hello = encoder.encode(Hello(schema_version=SCHEMA_VERSION))
    for _ in range(30):
        flood.send(hello)
    replies = []
    for _ in range(30):
        assert flood.poll(5000)
        replies.append(reply_decoder.decode(flood.recv()))
    flood.close()
    limited = [r for r in replies if isinstance(r, ErrorReply)]
    assert 15 <= len(limited) <= 20 and "too many requests" in limited[0].reason
    assert request(Target("127.0.0.1", server.port), Hello(schema_version=SCHEMA_VERSION)) == server.info


def test_an_unchanged_snapshot_is_encoded_once(make_server: Callable[..., RequestServer]) -> None:
    current = {"snapshot": _snapshot(7)}
    server = make_server(snapshot=lambda: current["snapshot"])
    ask = encoder.encode(GetSnapshot(schema_version=SCHEMA_VERSION))
    first, again = server.answer(ask), server.answer(ask)
    assert isinstance(first, bytes) and again is first
    current["snapshot"] = _snapshot(8)
    newer = server.answer(ask)
    assert newer is not first and msgspec.msgpack.decode(newer, type=Snapshot).seq == 8


def test_time_share_bounds_the_busy_time() -> None:
    share = TimeShare(share=0.02, max_wait_s=1.0, min_gap_s=0.005)
    share.spent(0.001, 10.001)  # a request that kept the thread busy 1 ms
    assert share.wait_s(10.001) == pytest.approx(0.049)
    assert share.wait_s(10.051) == 0.0
    share.spent(0.00001, 11.0)  # a cheap one: still at most 200 wake-ups a second
    assert share.wait_s(11.0) == pytest.approx(0.005)
    share.spent(0.5, 20.5)  # a huge snapshot: waits its cap, not 25 s
    assert share.wait_s(20.5) == pytest.approx(1.0)


def test_client_rates_refill_and_forget_the_oldest() -> None:
    rates = ClientRates(rate=10, burst=2, clients=2)
    assert [rates.admit(b"a", 0.0) for _ in range(3)] == [True, True, False]
    assert rates.admit(b"a", 0.1)  # 0.1 s at 10/s: one more token
    assert rates.admit(b"b", 0.1) and rates.admit(b"c", 0.1)  # "a" forgotten: a fresh bucket next time
    assert [rates.admit(b"a", 0.1) for _ in range(3)] == [True, True, False]


def test_a_served_flood_keeps_the_server_thread_within_its_share(make_server: Callable[..., RequestServer]) -> None:
    big = Snapshot(
        schema_version=SCHEMA_VERSION, seq=1, counters=Counters(),
        state=CacheState(step=Step(1), nodes={}, slots={}, requests={}, kv=KvState(page_size=1, size=1, free_runs=[(i, 1) for i in range(200_000)])),
    )  # fmt: skip
    calls = {"n": 0}

    def fresh() -> Snapshot:  # a new object each time: encoded every time (the worst case)
        calls["n"] += 1
        return msgspec.structs.replace(big, seq=calls["n"])

    server = make_server(snapshot=fresh, rates=ClientRates(rate=1e6, burst=1e6))
    ask = encoder.encode(GetSnapshot(schema_version=SCHEMA_VERSION))
    flooders = [_dealer(server) for _ in range(4)]
    began = time.process_time(), time.monotonic()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        for dealer in flooders:
            try:
                dealer.send(ask, flags=zmq.NOBLOCK)
            except zmq.Again:
                pass
            while dealer.poll(0):
                dealer.recv()
        time.sleep(0.001)
    wall = time.monotonic() - began[1]
    for dealer in flooders:
        dealer.close()
    encode_s = calls["n"] * _encode_seconds(big)
    assert calls["n"] >= 2
    # 2% share, plus one request's overrun; the server's own count and the encodes agree
    assert server.busy_seconds / wall < 0.06 and encode_s / wall < 0.06, (calls["n"], server.busy_seconds, encode_s, wall)


def _encode_seconds(snapshot: Snapshot) -> float:
    began = time.perf_counter()
    encoder.encode(snapshot)
    return time.perf_counter() - began


def test_clients_refuse_what_no_engine_sends() -> None:
    target = Target("127.0.0.1", 1)
    huge_error = encoder.encode(ErrorReply(schema_version=SCHEMA_VERSION, reason="x" * (2 << 20)))
    with pytest.raises(EngineRefused, match="no snapshot"):
        check_reply(target, huge_error)
    long_error = encoder.encode(ErrorReply(schema_version=SCHEMA_VERSION, reason="y" * 100_000 + "\n" * 50))
    with pytest.raises(EngineRefused) as refused:
        check_reply(target, long_error)
    assert len(str(refused.value)) <= 300 and "\n" not in str(refused.value)
    deep = b"\x82" + encoder.encode("reason") + b"\x91" * 100_000 + b"\x00" + encoder.encode("type") + encoder.encode("ErrorReply")
    with pytest.raises(EngineRefused, match="nested too deeply"):
        check_reply(target, deep)
