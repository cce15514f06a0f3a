"""Hostile files and answers on the command line (issue 14, points 4, 5, 8-12): one line on
stderr, exit 2, memory bounded; no traceback, no "no violations"."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from typer.testing import CliRunner

from mcinspect.cli import app
from mcinspect.recording import FORMAT, MAGIC, RecordingHeader, RecordingWriter
from mcinspect.schema import SCHEMA_VERSION, ErrorReply, Hello, SlotClaim, SlotId
from mcinspect.target import Target
from mcinspect_engine_hooks.server import RequestServer

from factory import delta, engine_info, node, snapshot, state

runner = CliRunner()
MIB = 1 << 20
GIB = 1 << 30
RSS_BOUND_MB = 250
"""`mcinspect check` of a small recording peaks at ~110 MB (python, typer, rich, msgspec, zmq)."""


def _header(compression: str = "zstd") -> bytes:
    payload = msgspec.msgpack.encode(RecordingHeader(FORMAT, SCHEMA_VERSION, compression, 0.0, None))  # type: ignore[arg-type]
    return MAGIC + len(payload).to_bytes(4, "big") + payload


def _zstd_rle(prefix: bytes, zeros: int) -> bytes:
    """A zstd frame holding `prefix` then `zeros` zero bytes, as RLE blocks of 128 KiB (4 bytes
    each: the 33 KB -> 1 GiB bomb of the issue), with no end: built, not compressed."""
    block = 128 * 1024
    out = [b"\x28\xb5\x2f\xfd", b"\x00", b"\x38"]  # magic, no content size, 128 KiB window
    out += [(len(prefix) << 3).to_bytes(3, "little"), prefix]  # a raw block
    rle = ((block << 3) | (1 << 1)).to_bytes(3, "little") + b"\x00"
    out += [rle] * (zeros // block)
    return b"".join(out)


_MEASURED = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
sys.stderr.buffer.write(err)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss // 1024)
"""
"""Runs a command and prints its exit code and peak RSS in MB. A child's peak RSS counts what it
shared with its parent when it was spawned: measured from this small process, not from pytest."""


def _check_rss(path: Path, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """Exit code, stderr and peak RSS in MB of `mcinspect check path` in its own process."""
    script = "import sys; from mcinspect.cli import app; sys.argv = ['mcinspect', 'check', sys.argv[1]]; app()"
    result = subprocess.run(
        [sys.executable, "-c", _MEASURED, sys.executable, "-c", script, str(path)],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120,
    )  # fmt: skip
    code, rss_mb = map(int, result.stdout.split())
    return code, result.stderr, rss_mb


@pytest.mark.parametrize("expands_to", [1 * GIB, 4 * GIB, 16 * GIB])
def test_zstd_bombs_of_the_issue_cost_no_memory(tmp_path: Path, expands_to: int) -> None:
    path = tmp_path / "bomb.mcrec"
    path.write_bytes(_header() + _zstd_rle(b"", expands_to))
    assert path.stat().st_size < expands_to // 30_000  # 1 GiB in ~33 KB, as reported
    began = time.monotonic()
    code, err, rss_mb = _check_rss(path)
    # Was: 2.1 GB RSS and "no violations" (1 GiB), MemoryError tracebacks, exit 1 (4, 16 GiB).
    assert code == 2 and err.count("\n") == 1 and "holds no whole frame" in err, err
    assert rss_mb < RSS_BOUND_MB and time.monotonic() - began < 20, rss_mb


def test_a_frame_claiming_more_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "claims.mcrec"
    path.write_bytes(_header() + _zstd_rle((GIB - 4).to_bytes(4, "big"), GIB))
    code, err, rss_mb = _check_rss(path)
    assert code == 2 and "over the" in err and "MCINSPECT_MAX_MESSAGE_MB" in err and err.count("\n") == 1, err
    assert rss_mb < RSS_BOUND_MB


def test_a_frame_within_the_limit_costs_the_limit_at_most(tmp_path: Path) -> None:
    path = tmp_path / "within.mcrec"
    path.write_bytes(_header() + _zstd_rle((60 * MIB).to_bytes(4, "big"), GIB))
    code, err, rss_mb = _check_rss(path, {"MCINSPECT_MAX_MESSAGE_MB": "64"})
    assert code == 2 and "does not decode" in err and err.count("\n") == 1, err
    assert rss_mb < RSS_BOUND_MB + 2 * 64, rss_mb  # the frame, and the bytes it is read into


def _nested(levels: int) -> bytes:
    return b"\x91" * levels + b"\x00"


def _deep_files(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    header = msgspec.msgpack.encode({"format": FORMAT, "schema_version": SCHEMA_VERSION, "compression": "none", "info": None})
    deep_header = b"\x85" + header[1:] + msgspec.msgpack.encode("extra") + _nested(100_000)
    path = tmp_path / "deep-header.mcrec"
    path.write_bytes(MAGIC + len(deep_header).to_bytes(4, "big") + deep_header)
    yield "header", path
    # A frame whose tag comes after the nested field: the decoder skips it to find the tag.
    frame = b"\x82" + msgspec.msgpack.encode("seq") + _nested(100_000) + msgspec.msgpack.encode("type") + msgspec.msgpack.encode("Snapshot")
    path = tmp_path / "deep-frame.mcrec"
    path.write_bytes(_header("none") + len(frame).to_bytes(4, "big") + frame)
    yield "frame", path
    path = tmp_path / "deep.json"
    path.write_bytes(b'{"state":' + b"[" * 100_000 + b"]" * 100_000 + b',"type":"Snapshot","schema_version":2}')
    yield "snapshot", path


@pytest.mark.parametrize("command", ["check", "render", "diff", "snapshot"])
def test_deep_nesting_in_any_file_is_one_line_exit_2(tmp_path: Path, command: str) -> None:
    for what, path in _deep_files(tmp_path):
        args = {"check": ["check", str(path)], "render": ["render", str(path), "-o", str(tmp_path / "x.svg")],
                "diff": ["diff", str(path), str(path)], "snapshot": ["snapshot", str(path), "--format", "tree"]}[command]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (what, result.output, result.exception)
        assert result.output.startswith("error:") and result.output.count("\n") == 1, (what, result.output)


def test_check_on_a_recording_without_a_whole_frame_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "empty.mcrec"
    path.write_bytes(_header("none"))
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2 and "holds no whole frame" in result.output  # was: "no violations", exit 0
    path.write_bytes(_header("none") + (5000).to_bytes(4, "big") + b"\x00" * 100)  # the first frame runs past the end
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2 and "holds no whole frame" in result.output
    assert "warning:" in result.output and "dropped a partial frame" in result.output


def _truncated(tmp_path: Path) -> Path:
    path = tmp_path / "cut.mcrec"
    with RecordingWriter(path, engine_info(), compress=False) as writer:
        writer.write(snapshot(0, state(0, nodes=[node(0, -1, 0, 0)])))
        writer.write(delta(1, nodes=[node(1, 0, 0)]))
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # the end mark and part of the last frame
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["check", "{p}"],
        ["render", "{p}", "-o", "{d}/t.svg", "--format", "dot"],
        ["diff", "{p}", "--from", "0", "--to", "0"],
        ["snapshot", "{p}", "--format", "tree"],
    ],
)
def test_every_command_shows_a_truncation_warning(tmp_path: Path, args: list[str]) -> None:
    path = _truncated(tmp_path)
    result = runner.invoke(app, [a.format(p=path, d=tmp_path) for a in args])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "no end mark" in result.output and "dropped a partial frame" in result.output


@pytest.mark.parametrize("command", [["replay", "{p}"], ["attach", "7777"]])
def test_the_tuis_refuse_a_pipe(tmp_path: Path, command: list[str]) -> None:
    path = _truncated(tmp_path)
    result = runner.invoke(app, [c.format(p=path) for c in command])
    assert result.exit_code == 2 and "needs a terminal" in result.output and result.output.count("error:") == 1


def test_check_text_is_linear_at_100k_violations(tmp_path: Path) -> None:
    """100k slot-partition violations (100k slots owned twice) in one snapshot: grouped, printed fast."""
    slots = {
        SlotId(s): [SlotClaim(slot=SlotId(s), kind="free"), SlotClaim(slot=SlotId(s), kind="working", rid="r")] for s in range(1, 100_001)
    }
    path = tmp_path / "many.json"
    path.write_bytes(msgspec.json.encode(snapshot(0, state(0, slots=slots))))
    began = time.monotonic()
    result = runner.invoke(app, ["check", str(path), "--checks", "slot-partition"])
    took = time.monotonic() - began
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("100,000 violations in 100,000 groups") and len(lines) == 100_002
    assert took < 15, took  # was ~0.75 ms a violation: 75 s


def test_tree_text_folds_flagged_nodes_past_max_nodes(tmp_path: Path) -> None:
    from mcinspect.tree_text import build_tree

    nodes = [node(0, -1, 0, 0)] + [node(i, 0, 0, 4) for i in range(1, 100_001)]
    began = time.monotonic()
    tree = build_tree(state(0, nodes=nodes), max_nodes=200, flagged=[n.id for n in nodes[1:]])
    assert time.monotonic() - began < 20
    assert tree.printed <= 201 and tree.folded >= 99_800  # was: every flagged node printed


def test_ipv6_loopback_binds_and_answers() -> None:
    server = RequestServer(
        "::1", 0, token="", info=engine_info(), snapshot=lambda: snapshot(0), history=lambda seq: None, stats=lambda: None,  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    server.start()
    try:
        from mcinspect.client import request

        assert request(Target.parse(f"[::1]:{server.port}"), Hello(schema_version=SCHEMA_VERSION)) == engine_info()
    finally:
        server.close()


def test_a_bad_hooks_host_is_refused_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcinspect_engine_hooks.config import ConfigError, HooksConfig

    monkeypatch.setenv("MCINSPECT_PORT", "7000")
    monkeypatch.setenv("MCINSPECT_HOST", "::1")
    assert HooksConfig.from_env().host == "::1"  # type: ignore[union-attr]
    monkeypatch.setenv("MCINSPECT_HOST", "[::1]")
    assert HooksConfig.from_env().host == "::1"  # type: ignore[union-attr]
    monkeypatch.setenv("MCINSPECT_HOST", "my-host")
    with pytest.raises(ConfigError, match="not an IP address"):
        HooksConfig.from_env()


class _Hostile:
    """A ROUTER on a port that answers every request with `reply`."""

    def __init__(self, reply: bytes) -> None:
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.port = self.socket.bind_to_random_port("tcp://127.0.0.1")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(reply,), daemon=True)
        self._thread.start()

    def _run(self, reply: bytes) -> None:
        while not self._stop.is_set():
            if self.socket.poll(50):
                identity, *_ = self.socket.recv_multipart()
                self.socket.send_multipart([identity, reply])

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.socket.close()


@pytest.mark.parametrize(
    "reply, expected",
    [
        (
            b"\x82"
            + msgspec.msgpack.encode("reason")
            + _nested(100_000)
            + msgspec.msgpack.encode("type")
            + msgspec.msgpack.encode("ErrorReply"),
            "nested too deeply",
        ),
        (msgspec.msgpack.encode(ErrorReply(schema_version=SCHEMA_VERSION, reason="z" * (8 * MIB))), "no snapshot"),
        (b"\xc1garbage", "unreadable reply"),
    ],
)
def test_clients_answered_by_a_hostile_process(reply: bytes, expected: str) -> None:
    hostile = _Hostile(reply)
    try:
        result = runner.invoke(app, ["info", str(hostile.port), "--timeout", "3"])
    finally:
        hostile.close()
    assert result.exit_code == 2 and expected in result.output
    assert result.output.count("\n") == 1 and len(result.output) < 400  # was: 4.1 GB RSS printing a 600 MiB reason


def test_a_reply_over_the_message_limit_never_reaches_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCINSPECT_MAX_MESSAGE_MB", "1")
    hostile = _Hostile(msgspec.msgpack.encode(ErrorReply(schema_version=SCHEMA_VERSION, reason="z" * (4 * MIB))))
    try:
        result = runner.invoke(app, ["info", str(hostile.port), "--timeout", "1"])
    finally:
        hostile.close()
    assert result.exit_code == 2 and "no answer" in result.output  # ZMQ cut it off, unread
