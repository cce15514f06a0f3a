"""Fuzzing every decoder of the project with a seeded generator (issue 14): random, nested,
oversized, truncated and wrong-typed requests, replies, deltas, snapshot files and recordings.

Each target must answer with its own error type or a valid result: never another exception,
never a hang. The cases are built from real messages (the schema's own structs, turned into
plain values, then mutated) so they reach deep into the decoders rather than failing at the
first byte. Seeded: a failure names its case and replays. MCINSPECT_FUZZ_CASES scales the run
(default 3,000 per target, 1,000 per recording kind: a few seconds in all); each test prints its count and time.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sglang.srt.mem_cache.allocator.mamba import MambaSlotAllocator

from mcinspect.client import EngineRefused, check_reply
from mcinspect.recording import MAGIC, RecordingError, RecordingReader, RecordingWriter
from mcinspect.schema import SCHEMA_VERSION, Delta, GetHistory, GetSnapshot, Hello, InsertEvent, Rid, SlotClaim, SlotId, Step
from mcinspect.snapshot_file import SnapshotFileError, parse_snapshot
from mcinspect.target import Target
from mcinspect.untrusted import DecodeFailed, decode, msgpack_depth_exceeds
from mcinspect_engine_hooks.event_sink import EventSink
from mcinspect_engine_hooks.publisher import HistoryWindow
from mcinspect_engine_hooks.request_budget import ClientRates
from mcinspect_engine_hooks.server import RequestServer
from mcinspect_engine_hooks.stats import StatsCollector

from factory import delta, engine_info, node, snapshot, state

CASES = int(os.environ.get("MCINSPECT_FUZZ_CASES", "3000"))
SEED = 14


def _rich_snapshot() -> Any:
    slots = {SlotId(1): [SlotClaim(slot=SlotId(1), kind="tree", node=1)], SlotId(2): [SlotClaim(slot=SlotId(2), kind="free")]}
    return snapshot(3, state(3, nodes=[node(0, -1, 0, 0), node(1, 0, 0, slot=1)], slots=slots))


def _rich_delta(seq: int) -> Delta:
    event = InsertEvent(step=Step(seq), rid=Rid("r"), node=1, slot=SlotId(1), seqlen=16, ping_pong_index=0)  # type: ignore[arg-type]
    return delta(seq, nodes=[node(seq + 1, 1, 16, slot=2)], events=[event])


SEEDS: list[Any] = [
    Hello(schema_version=SCHEMA_VERSION, token="t"),
    GetSnapshot(schema_version=SCHEMA_VERSION),
    GetHistory(schema_version=SCHEMA_VERSION, after_seq=3),
    engine_info(),
    _rich_snapshot(),
    _rich_delta(4),
]


class Mutator:
    """Seeded mutations of plain msgpack-able values and of bytes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def value(self, depth: int = 0) -> Any:
        """A random value of any msgpack type (shallow)."""
        r = self.rng
        kind = r.randrange(9)
        if kind == 0 or depth > 3:
            return r.choice([None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, float("nan")])
        if kind == 1:
            return r.randbytes(r.choice([0, 3, 300]))
        if kind == 2:
            return "x" * r.choice([0, 1, 70_000])
        if kind == 3:
            return [self.value(depth + 1) for _ in range(r.randrange(4))]
        if kind == 4:
            return {r.choice(["k", 7, b"b", None, "type"]): self.value(depth + 1) for _ in range(r.randrange(3))}
        if kind == 5:
            return self.nested(r.choice([40, 2_000, 60_000]))
        return r.randrange(-(2**31), 2**31)

    def nested(self, levels: int) -> Any:
        out: Any = 0
        for _ in range(min(levels, 800)):  # msgspec itself cannot encode deeper: bytes do the rest
            out = [out]
        return out

    def tree(self, plain: Any) -> Any:
        """`plain` with one random place replaced, dropped, duplicated or reordered."""
        r = self.rng
        if isinstance(plain, dict) and plain:
            keys = list(plain)
            key = r.choice(keys)
            action = r.randrange(5)
            out = dict(plain)
            if action == 0:
                out[key] = self.value()
            elif action == 1:
                del out[key]
            elif action == 2:
                out = {k: out[k] for k in [k for k in keys if k != "type"] + ["type"] if k in out}  # tag last
            elif action == 3:
                out["extra"] = self.value()
            else:
                out[key] = self.tree(plain[key])
            return out
        if isinstance(plain, list) and plain:
            out = list(plain)
            i = r.randrange(len(out))
            out[i] = self.tree(out[i]) if r.random() < 0.6 else self.value()
            if r.random() < 0.2:
                out.append(self.value())
            return out
        return self.value()

    def payload(self) -> bytes:
        """Bytes for a decoder: a mutated real message, or bytes cut, flipped, nested."""
        r = self.rng
        seed = msgspec.to_builtins(r.choice(SEEDS))
        data = msgspec.msgpack.encode(self.tree(seed) if r.random() < 0.8 else seed)
        mode = r.randrange(6)
        if mode == 0 and data:
            data = data[: r.randrange(len(data))]  # truncated
        elif mode == 1 and data:
            flips = bytearray(data)
            for _ in range(r.randrange(1, 5)):
                flips[r.randrange(len(flips))] = r.randrange(256)
            data = bytes(flips)
        elif mode == 2:
            data = b"\x91" * r.choice([100, 50_000]) + data  # nested from outside
        elif mode == 3:
            at = r.randrange(len(data) + 1)
            data = data[:at] + b"\xdd\xff\xff\xff\xff" + data[at:]  # a 4-billion-entry array header
        return data


def _fuzz(name: str, target: Callable[[bytes], None], capsys: pytest.CaptureFixture[str], cases: int = CASES, seed: int = SEED) -> None:
    mutator = Mutator(seed)
    began = time.monotonic()
    for case in range(cases):
        payload = mutator.payload()
        try:
            target(payload)
        except Exception as exc:  # noqa: BLE001 - this is what the test looks for
            raise AssertionError(f"{name} case {case} (seed {seed}): {type(exc).__name__}: {exc!s:.200} on {payload[:80]!r}") from exc
    with capsys.disabled():
        print(f"\nfuzz {name}: {cases} cases in {time.monotonic() - began:.2f} s")


def test_fuzz_the_request_server(capsys: pytest.CaptureFixture[str]) -> None:
    server = RequestServer(
        "127.0.0.1", 0, token="t", info=engine_info(), snapshot=_rich_snapshot, history=lambda seq: HistoryWindow(seq + 1, []),
        stats=lambda: StatsCollector(MambaSlotAllocator(8, "cpu"), EventSink()).snapshot(step=1, hook_errors=0), rates=ClientRates(1e9, 1e9),
    )  # fmt: skip
    answered = msgspec.msgpack.Decoder()

    def target(payload: bytes) -> None:
        reply = server.answer(payload)  # never raises
        answered.decode(reply if isinstance(reply, bytes) else msgspec.msgpack.encode(reply))
        assert not msgpack_depth_exceeds(payload) or server.rejected

    try:
        _fuzz("request server", target, capsys)
    finally:
        server.close()
    assert server.errors == 0  # every refusal was a reason, none a failure of mcinspect


def test_fuzz_client_replies(capsys: pytest.CaptureFixture[str]) -> None:
    where = Target("127.0.0.1", 1)

    def target(payload: bytes) -> None:
        try:
            check_reply(where, payload)
        except EngineRefused as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 600

    _fuzz("client replies", target, capsys)


def test_fuzz_stream_deltas(capsys: pytest.CaptureFixture[str]) -> None:
    decoder = msgspec.msgpack.Decoder(Delta)  # what a Session decodes each stream message with

    def target(payload: bytes) -> None:
        try:
            decode(decoder, payload, DecodeFailed)
        except DecodeFailed:
            pass

    _fuzz("stream deltas", target, capsys)


def test_fuzz_snapshot_files(capsys: pytest.CaptureFixture[str]) -> None:
    mutator = Mutator(SEED + 1)

    def target(payload: bytes) -> None:
        try:
            text = msgspec.json.encode(mutator.tree(msgspec.to_builtins(_rich_snapshot())))
        except TypeError:  # JSON has no bytes or None keys: a mutation only msgpack can carry
            text = msgspec.json.encode(msgspec.to_builtins(_rich_snapshot()))
        if payload and payload[0] & 1:
            text = text[: len(text) * payload[0] // 256]
        if payload and payload[0] & 2:
            text = b"[" * 50_000 + text
        try:
            parse_snapshot(text)
        except SnapshotFileError as exc:
            assert "\n" not in str(exc)

    _fuzz("snapshot files", target, capsys)


@pytest.mark.parametrize("compress", [False, True])
def test_fuzz_recordings(tmp_path: Path, compress: bool, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.mcrec"
    with RecordingWriter(good, engine_info(), compress=compress) as writer:
        writer.write(_rich_snapshot())
        for seq in range(4, 12):
            writer.write(_rich_delta(seq))
    original = good.read_bytes()
    rng = random.Random(SEED + compress)
    path = tmp_path / "case.mcrec"

    def target(payload: bytes) -> None:
        data = bytearray(original)
        mode = rng.randrange(5)
        at = rng.randrange(len(MAGIC), len(data))
        if mode == 0:
            del data[at:]  # truncated anywhere
        elif mode == 1:
            data[at] = rng.randrange(256)  # a flipped byte
        elif mode == 2:
            data[at:at] = len(payload).to_bytes(4, "big") + payload  # a foreign frame
        elif mode == 3:
            data[at:at] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff"])  # a huge length
        else:
            data = bytearray(original[: len(MAGIC)] + payload)  # a foreign header
        path.write_bytes(bytes(data))
        try:
            reader = RecordingReader(path, on_warning=lambda message: None)
            for _ in reader.states():
                pass
        except RecordingError as exc:
            assert "\n" not in str(exc)

    _fuzz(f"recordings ({'zstd' if compress else 'raw'})", target, capsys, cases=CASES // 3)


def test_fuzz_the_depth_scan_agrees_with_msgspec(capsys: pytest.CaptureFixture[str]) -> None:
    any_value = msgspec.msgpack.Decoder()

    def target(payload: bytes) -> None:
        deep = msgpack_depth_exceeds(payload, 32)
        try:
            any_value.decode(payload)
        except RecursionError:
            assert deep, "msgspec recursed past the limit the scan let through"
        except msgspec.DecodeError:
            pass

    _fuzz("depth scan", target, capsys)
