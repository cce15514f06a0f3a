"""Both inspector sockets need the engine's key (issue 14, points 2 and 3; mcinspect/auth.py):
off loopback the token's, on loopback a per-engine key in a file only the engine's user reads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from mcinspect import auth
from mcinspect.schema import EVERY_STEP_TOPIC, SCHEMA_VERSION, STREAM_TOPIC, Counters, Delta, Step
from mcinspect_engine_hooks.publisher import Publisher

NOBODY = 65534


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _delta(seq: int) -> Delta:
    return Delta(
        schema_version=SCHEMA_VERSION, seq=seq, step=Step(seq), upsert_nodes=[], removed_nodes=[], slots={},
        upsert_requests=[], removed_requests=[], kv=None, events=[], counters=Counters(published=seq),
    )  # fmt: skip


class _Feed:
    """A started Publisher with a thread publishing a delta every 10 ms."""

    def __init__(self, host: str, keys: auth.CurveKeys | None) -> None:
        self.publisher = Publisher(host, _free_port(), keys=keys)
        self.publisher.start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seq = 0
        while not self._stop.wait(0.01):
            seq += 1
            self.publisher.publish(_delta(seq))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.publisher.close()


@pytest.fixture
def feeds() -> Iterator[list[_Feed]]:
    made: list[_Feed] = []
    yield made
    for feed in made:
        feed.close()


def _received(port: int, server_key: bytes | None, seconds: float = 1.0, every_step: bool = False) -> int:
    """Stream messages a subscriber on 127.0.0.1 gets in `seconds` (subscribed to everything)."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    auth.secure_client(sub, server_key)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    if every_step:
        sub.setsockopt(zmq.SUBSCRIBE, EVERY_STEP_TOPIC)
    sub.connect(f"tcp://127.0.0.1:{port}")
    count, deadline = 0, time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if sub.poll(int(left * 1000) + 1):
            assert sub.recv_multipart()[0] == STREAM_TOPIC
            count += 1
    sub.close()
    return count


def test_off_loopback_the_stream_needs_the_token(feeds: list[_Feed]) -> None:
    feed = _Feed("0.0.0.0", auth.keys_from_token("s3cret"))
    feeds.append(feed)
    port = feed.publisher.port
    # The attack of the issue: a bare SUB got 2,269 deltas in 30 s and switched the engine to
    # every-step capture. Now: nothing, and the engine never hears its subscription.
    assert _received(port, None, every_step=True) == 0
    assert _received(port, auth.keys_from_token("guess").public) == 0
    assert not feed.publisher.watched and not feed.publisher.every_step
    assert _received(port, auth.keys_from_token("s3cret").public) > 20


def test_an_open_stream_is_what_the_attack_saw(feeds: list[_Feed]) -> None:
    """The control: the same subscriber on a stream without keys receives it all."""
    feed = _Feed("127.0.0.1", None)
    feeds.append(feed)
    assert _received(feed.publisher.port, None, every_step=True) > 20


def test_the_key_file_is_the_owners_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(auth.KEY_DIR_ENV, str(tmp_path / "keys"))
    keys = auth.fresh_keys()
    path = auth.write_key_file(7001, keys)
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert auth.server_key_for("127.0.0.1", 7001, "") == keys.public  # no flag on the same host
    assert auth.server_key_for("10.0.0.8", 7001, "") is None  # a file is for loopback engines only
    assert auth.server_key_for("127.0.0.1", 7001, "tok") == auth.keys_from_token("tok").public
    auth.remove_key_file(7001, auth.fresh_keys())  # another engine's key: left alone
    assert path.exists()
    auth.remove_key_file(7001, keys)
    assert not path.exists()
    (tmp_path / "open").mkdir(mode=0o755)
    (tmp_path / "open").chmod(0o755)
    monkeypatch.setenv(auth.KEY_DIR_ENV, str(tmp_path / "open"))
    with pytest.raises(auth.AuthError, match="0700"):
        auth.write_key_file(7001, keys)


_AS_ANOTHER_USER = textwrap.dedent(
    """
    import json, os, sys, time
    import zmq
    key_file, port = sys.argv[1], int(sys.argv[2])
    try:
        open(key_file, "rb").read()
        read = "read"
    except OSError as exc:
        read = type(exc).__name__
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{port}")
    got, deadline = 0, time.monotonic() + 1.5
    while (left := deadline - time.monotonic()) > 0:
        if sub.poll(int(left * 1000) + 1):
            sub.recv_multipart()
            got += 1
    print(json.dumps({"uid": os.getuid(), "key_file": read, "messages": got}))
    """
)


SYSTEM_PYTHON = "/usr/bin/python3"
"""The other user runs the system's interpreter (the venv's may live under root's home) with
this pyzmq on its path."""


@pytest.mark.skipif(os.getuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK), reason="needs root and a system python3")
def test_another_local_user_gets_nothing_on_loopback(feeds: list[_Feed], key_dir: str) -> None:
    keys = auth.fresh_keys()
    feed = _Feed("127.0.0.1", keys)
    feeds.append(feed)
    path = auth.write_key_file(feed.publisher.port, keys)
    other = subprocess.run(
        [SYSTEM_PYTHON, "-c", _AS_ANOTHER_USER, str(path), str(feed.publisher.port)],
        user=NOBODY, group=NOBODY, env={"HOME": "/tmp", "PYTHONPATH": str(Path(zmq.__file__).parent.parent)},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    seen = json.loads(other.stdout)
    assert seen == {"uid": NOBODY, "key_file": "PermissionError", "messages": 0}
    assert not feed.publisher.watched
    # The engine's own user, with no flag: the key from the file.
    assert _received(feed.publisher.port, auth.server_key_for("127.0.0.1", feed.publisher.port, "")) > 20
