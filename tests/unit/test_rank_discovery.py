"""Every rank of an engine from its base port, over the engine side's real transport: the two
ranks of the committed `demo --tp 2` recordings served at PORT and PORT + 2 (on one loopback
address, or two: 127.0.0.2 stands for a second host), each answering Hello with the rank and
world size it recorded. Then the client commands that take the base port: info, snapshot
--rank, check (live, every rank and tp-agree), verify (one rank only), and --rank of files."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import msgspec
import pytest
from recorded_engine import RECORDINGS, RecordedEngine
from typer.testing import CliRunner

from mcinspect.check_runner import check_live
from mcinspect.checks import Violation
from mcinspect.cli import app
from mcinspect.client import EngineRefused
from mcinspect.rank_files import RankChoiceError, rank_file
from mcinspect.ranks import RankMissing, discover
from mcinspect.target import Target, TargetError, parse_targets
from mcinspect.verify_command import VerifyError, single_rank

from engine_runs import free_ports_for_ranks

SECOND_HOST = "127.0.0.2"
"""Another loopback address of this machine: a host of its own to ZMQ and to the discovery."""


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No CURVE key of another engine that once had these ports."""
    monkeypatch.setenv("MCINSPECT_KEY_DIR", str(tmp_path / "keys"))


@pytest.fixture
def two_ranks() -> tuple[int, list[RecordedEngine]]:
    port = free_ports_for_ranks(2)
    engines = [RecordedEngine("tp2-desync", port), RecordedEngine("tp2-desync.rank1", port + 2)]
    yield port, engines
    for engine in engines:
        engine.stop()


def test_targets_are_one_engine_s_hosts_rank_zero_first() -> None:
    assert parse_targets("7777") == (Target("127.0.0.1", 7777),)
    assert parse_targets("h1:7777,h2:7777,h1:7777") == (Target("h1", 7777), Target("h2", 7777))
    assert parse_targets("[::1]:7777,10.0.0.2:7777") == (Target("::1", 7777), Target("10.0.0.2", 7777))
    with pytest.raises(TargetError, match="without empty entries"):
        parse_targets("h1:7777,")


def test_the_ranks_are_found_from_the_base_port(two_ranks) -> None:
    port, _ = two_ranks
    ranks = discover((Target("127.0.0.1", port),))
    assert [(r.rank, r.target.port, r.info.tp_rank, r.info.world_size) for r in ranks] == [(0, port, 0, 2), (1, port + 2, 1, 2)]


def test_a_rank_that_does_not_answer_is_named(two_ranks) -> None:
    port, engines = two_ranks
    engines[1].stop()
    started = time.monotonic()
    with pytest.raises(RankMissing) as missing:
        discover((Target("127.0.0.1", port),), timeout_s=1.0)
    assert time.monotonic() - started < 3
    message = str(missing.value)
    assert f"rank 1 of 2 (tp1) answers at none of 127.0.0.1:{port + 2} within 1 s" in message
    assert "list each node's HOST:PORT" in message and "\n" not in message
    info = CliRunner().invoke(app, ["info", str(port), "--timeout", "1"])
    assert info.exit_code == 2 and "rank 1 of 2" in info.output and len(info.output.strip().splitlines()) == 1


def test_the_port_of_another_rank_is_refused_with_the_base_port(two_ranks) -> None:
    port, _ = two_ranks
    with pytest.raises(EngineRefused, match=rf"is rank 1 of the engine; give rank 0's port, the engine's MCINSPECT_PORT \({port}\)"):
        discover((Target("127.0.0.1", port + 2),))


def test_ranks_on_two_hosts_are_found_on_either() -> None:
    """Multi-node TP: rank 1's node is another host, with the same base port."""
    port = free_ports_for_ranks(2)
    engines = [RecordedEngine("tp2", port), RecordedEngine("tp2.rank1", port + 2, host=SECOND_HOST)]
    try:
        started = time.monotonic()
        ranks = discover((Target("127.0.0.1", port), Target(SECOND_HOST, port)), timeout_s=5.0)
        assert time.monotonic() - started < 2.5  # found, not waited out on the host rank 1 is not on
        assert [(r.rank, r.target) for r in ranks] == [(0, Target("127.0.0.1", port)), (1, Target(SECOND_HOST, port + 2))]
        with pytest.raises(RankMissing, match="list each node's HOST:PORT"):
            discover((Target("127.0.0.1", port),), timeout_s=0.5)
        info = CliRunner().invoke(app, ["info", f"127.0.0.1:{port},{SECOND_HOST}:{port}", "--json"])
        assert info.exit_code == 0, info.output
        rows = [json.loads(line) for line in info.output.splitlines()]
        assert [(row["rank"], row["address"]["host"]) for row in rows] == [(0, "127.0.0.1"), (1, SECOND_HOST)]
    finally:
        for engine in engines:
            engine.stop()


def test_another_engine_s_process_at_a_rank_s_port_is_not_taken() -> None:
    """Rank 1's port on the second host answers, but as rank 1 of another (one-rank) engine."""
    port = free_ports_for_ranks(2)
    engines = [RecordedEngine("tp2", port), RecordedEngine("clean", port + 2, host=SECOND_HOST)]
    try:
        with pytest.raises(RankMissing, match=rf"{SECOND_HOST}:{port + 2} is rank 0 of 0 \(another engine\?\)"):
            discover((Target("127.0.0.1", port), Target(SECOND_HOST, port)), timeout_s=0.5)
    finally:
        for engine in engines:
            engine.stop()


def test_snapshot_takes_the_rank_asked_for(two_ranks, tmp_path: Path) -> None:
    port, engines = two_ranks
    out = tmp_path / "rank1.json"
    done = CliRunner().invoke(app, ["snapshot", str(port), "--rank", "1", "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["state"] == json.loads(msgspec.json.encode(engines[1].snapshot.state))
    wrong = CliRunner().invoke(app, ["snapshot", str(port), "--rank", "2", "-o", str(out)])
    assert wrong.exit_code == 2 and "--rank 2: the engine has ranks 0-1" in wrong.output


def test_a_live_check_follows_every_rank_and_compares_them(two_ranks) -> None:
    """The desynchronised rank's first disagreement (step 15 in the recording) comes in live."""
    port, engines = two_ranks
    found: list[Violation] = []
    targets = [rank.target for rank in discover((Target("127.0.0.1", port),))]
    stop = threading.Event()
    checking = threading.Thread(target=lambda: check_live(targets, on_violation=found.append, stop=stop, names=["tp-agree"]))
    checking.start()
    try:
        time.sleep(1.0)  # both sessions subscribed
        for engine in engines:
            engine.publish_rest()
        deadline = time.monotonic() + 10
        while not any(v.step == 15 for v in found) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        checking.join(timeout=10)
    assert found and min(v.step for v in found) == 15 and {v.check for v in found} == {"tp-agree"}


def test_verify_on_request_needs_an_engine_of_one_rank(two_ranks) -> None:
    port, _ = two_ranks
    with pytest.raises(VerifyError, match="needs an engine of one rank; this one has 2 \\(tp 2\\)"):
        single_rank((Target("127.0.0.1", port),), "", 2.0)


def test_a_recording_s_rank_is_the_file_beside_it(tmp_path: Path) -> None:
    path = str(RECORDINGS / "tp2.mcrec")
    assert rank_file(path, 1) == str(RECORDINGS / "tp2.rank1.mcrec")
    with pytest.raises(RankChoiceError, match=r"--rank 2: .*tp2.mcrec holds ranks 0-1 \(no tp2.rank2.mcrec beside it\)"):
        rank_file(path, 2)
    desync, rank1 = str(RECORDINGS / "tp2-desync.mcrec"), str(RECORDINGS / "tp2-desync.rank1.mcrec")
    runner = CliRunner()
    for command in (["snapshot", "--format", "tree"], ["diff", "--from", "14", "--to", "40", "--json"]):
        picked = runner.invoke(app, [command[0], desync, *command[1:], "--rank", "1"])
        direct = runner.invoke(app, [command[0], rank1, *command[1:]])
        rank0 = runner.invoke(app, [command[0], desync, *command[1:]])
        assert picked.exit_code == 0 and picked.output == direct.output.replace(rank1, desync.replace(".mcrec", ".rank1.mcrec"))
        assert picked.output != rank0.output  # the ranks differ after step 15
    one = CliRunner().invoke(app, ["diff", str(RECORDINGS / "clean.mcrec"), "--from", "1", "--to", "2", "--rank", "1"])
    assert one.exit_code == 2 and "holds rank 0 only" in one.output
