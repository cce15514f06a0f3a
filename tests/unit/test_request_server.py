"""The request socket: answers what it knows, refuses the rest with a reason, never raises."""

from __future__ import annotations

import socket
import time

import msgspec
import pytest
import zmq

from mcinspect.client import EngineRefused, EngineUnreachable, request
from mcinspect.schema import SCHEMA_VERSION, EngineInfo, ErrorReply, GetStats, Hello, Stats, encoder, reply_decoder
from mcinspect.target import Target
from mcinspect_engine_hooks.server import RequestServer
from mcinspect_engine_hooks.stats import StatsCollector


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _info(port: int) -> EngineInfo:
    return EngineInfo(
        schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="m", strategy="extra_buffer",
        page_size=16, overlap=True, tree_core="RustUnifiedTreeCore", mamba_pool_size=8, kv_pool_tokens=64,
        tp_rank=0, dp_rank=0, pid=1, request_port=port,
    )


def _server(token: str = "") -> RequestServer:
    port = _free_port()
    server = RequestServer("127.0.0.1", port, token, _info(port), lambda: StatsCollector(8).snapshot(hook_errors=3))
    server.start()
    return server


def test_hello_and_stats_round_trip_over_zmq() -> None:
    server = _server()
    target = Target("127.0.0.1", server.info.request_port)
    assert request(target, Hello(schema_version=SCHEMA_VERSION)) == server.info
    stats = request(target, GetStats(schema_version=SCHEMA_VERSION))
    assert isinstance(stats, Stats) and stats.hook_errors == 3 and stats.mamba_pool_size == 8


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"\x00\xff garbage", "malformed"),
        (encoder.encode({"type": "Hello"}), "malformed"),  # required field missing
        (encoder.encode({"type": "Nope", "schema_version": 1}), "malformed"),
        (encoder.encode({"type": "Hello", "schema_version": "1"}), "malformed"),  # wrong type
        (encoder.encode(Hello(schema_version=SCHEMA_VERSION + 1)), "schema version"),
    ],
)
def test_bad_requests_get_an_error_reply(payload: bytes, reason: str) -> None:
    server = _server()
    reply = server.answer(payload)
    assert isinstance(reply, ErrorReply) and reason in reply.reason
    assert server.rejected == 1


def test_token_is_checked_when_set() -> None:
    server = _server(token="s3cret")
    target = Target("127.0.0.1", server.info.request_port)
    with pytest.raises(EngineRefused, match="token"):
        request(target, Hello(schema_version=SCHEMA_VERSION))
    assert request(target, Hello(schema_version=SCHEMA_VERSION, token="s3cret")) == server.info


def test_server_survives_a_flood_of_garbage() -> None:
    server = _server()
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://127.0.0.1:{server.info.request_port}")
    for i in range(200):
        dealer.send(bytes([i % 256]) * (i + 1))
    replies = 0
    deadline = time.monotonic() + 10
    while replies < 200 and time.monotonic() < deadline:
        if dealer.poll(1000):
            assert isinstance(reply_decoder.decode(dealer.recv()), ErrorReply)
            replies += 1
    dealer.close()
    assert replies == 200 and server.rejected == 200
    assert request(Target("127.0.0.1", server.info.request_port), Hello(schema_version=SCHEMA_VERSION)) == server.info


def test_nothing_listening_is_a_bounded_wait() -> None:
    began = time.monotonic()
    with pytest.raises(EngineUnreachable, match="no answer"):
        request(Target("127.0.0.1", _free_port()), Hello(schema_version=SCHEMA_VERSION), timeout_s=0.5)
    assert time.monotonic() - began < 3


def test_schema_round_trips_through_msgpack() -> None:
    info = _info(7000)
    assert reply_decoder.decode(encoder.encode(info)) == info
    assert msgspec.json.decode(msgspec.json.encode(info), type=EngineInfo) == info
