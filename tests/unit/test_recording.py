"""Recordings and snapshot files: round trip, crash-safe writes, truncated, corrupt and
other-version files (one-line errors that name the fix)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import msgspec
import pytest

from mcinspect import recording
from mcinspect.recording import (
    FORMAT,
    MAGIC,
    RecordingCorrupt,
    RecordingError,
    RecordingReader,
    RecordingVersionError,
    RecordingWriter,
    StepNotRecorded,
)
from mcinspect.schema import (
    OLDEST_READABLE_SCHEMA,
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    EngineInfo,
    KvState,
    LockEvent,
    NodeId,
    NodeRecord,
    Seq,
    SlotClaim,
    SlotContent,
    SlotId,
    Snapshot,
    Step,
    apply_delta,
)
from mcinspect.snapshot_file import SnapshotCorrupt, SnapshotFileError, SnapshotVersionError, load_snapshot

import factory

HAVE_ZSTD = importlib.util.find_spec("zstandard") is not None
COMPRESSIONS = [False, pytest.param(True, marks=pytest.mark.skipif(not HAVE_ZSTD, reason="zstandard is not installed"))]

INFO = EngineInfo(
    schema_version=SCHEMA_VERSION,
    sglang_version="0.5.23",
    model_path="tiny-qwen3-next",
    strategy="extra_buffer",
    page_size=16,
    overlap=True,
    tree_core="python",
    full_tree_detail=True,
    mamba_pool_size=8,
    kv_pool_tokens=4096,
    tp_rank=0,
    dp_rank=0,
    pid=1234,
    request_port=7777,
    stream_port=7778,
)


def node(i: int, parent: int, depth: int, key_len: int = 16, slot: int = -1, lock: int = 0) -> NodeRecord:
    return factory.node(i, parent, depth, key_len, slot=slot, lock=lock, token_ids=range(key_len))


def snapshot(step: int = 10, seq: int = 0) -> Snapshot:
    state = CacheState(
        step=Step(step),
        nodes={NodeId(0): node(0, -1, 0, 0), NodeId(1): node(1, 0, 0, slot=1)},
        slots={SlotId(1): [SlotClaim(slot=SlotId(1), kind="tree", node=NodeId(1))], SlotId(2): [SlotClaim(slot=SlotId(2), kind="free")]},
        requests={},
        kv=KvState(page_size=16, size=4096, free_runs=[(16, 4080)]),
    )
    return Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(seq), state=state, counters=Counters())


def delta(seq: int, step: int) -> Delta:
    """Step `step` inserts node `step` under node 1 with slot 2, locks node 1, fingerprints slot 2."""
    return Delta(
        schema_version=SCHEMA_VERSION,
        seq=Seq(seq),
        step=Step(step),
        upsert_nodes=[node(step, 1, 16, slot=2), node(1, 0, 0, slot=1, lock=seq)],
        removed_nodes=[NodeId(step - 1)] if step > 11 else [],
        slots={SlotId(2): [SlotClaim(slot=SlotId(2), kind="tree", node=NodeId(step))]},
        upsert_requests=[],
        removed_requests=[],
        kv=None,
        events=[LockEvent(step=Step(step), node=NodeId(1), rid="r", locked=True)],
        counters=Counters(published=seq),
        contents={SlotId(2): SlotContent(slot=SlotId(2), fingerprint=step, nonfinite=0, zero=False, step=Step(step))},
    )


def record(path: Path, frames: int = 4, compress: bool = False) -> list[Snapshot | Delta]:
    written: list[Snapshot | Delta] = [snapshot(), *(delta(seq, 10 + seq) for seq in range(1, frames))]
    with RecordingWriter(path, INFO, compress=compress) as writer:
        for frame in written:
            writer.write(frame)
    return written


def expected_states(frames: list[Snapshot | Delta]) -> list[CacheState]:
    first = frames[0]
    assert isinstance(first, Snapshot)
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(first.state), type=CacheState)
    out = [msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=CacheState)]
    for frame in frames[1:]:
        assert isinstance(frame, Delta)
        apply_delta(state, frame)
        out.append(msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=CacheState))
    return out


# --- recordings -----------------------------------------------------------------------------


@pytest.mark.parametrize("compress", COMPRESSIONS)
def test_round_trip_rebuilds_every_state(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "run.mcirec"
    frames = record(path, frames=6, compress=compress)
    reader = RecordingReader(path)
    assert reader.info == INFO and reader.header.compression == ("zstd" if compress else "none")
    assert reader.header.schema_version == SCHEMA_VERSION and reader.header.format == FORMAT
    assert list(reader) == frames
    expected = expected_states(frames)
    recorded = list(reader.states())
    assert [r.state for r in recorded] == expected and [r.step for r in recorded] == [10, 11, 12, 13, 14, 15]
    assert recorded[1].state.nodes[NodeId(1)].full_lock == 1  # earlier copies are not touched by later frames
    assert reader.state_at(Step(13)) == expected[3]
    assert reader.states_at([Step(15), Step(10)]) == [expected[5], expected[0]]
    assert not reader.truncated and not reader.warnings


def test_steps_between_frames_and_outside_the_recording(tmp_path: Path) -> None:
    path = tmp_path / "gaps.mcirec"
    frames: list[Snapshot | Delta] = [snapshot(step=10), delta(1, 12), delta(2, 15)]
    with RecordingWriter(path, None, compress=False) as writer:
        for frame in frames:
            writer.write(frame)
    reader = RecordingReader(path)
    assert reader.info is None
    expected = expected_states(frames)
    assert reader.state_at(Step(11)) == expected[0] and reader.state_at(Step(14)) == expected[1]
    for step, words in ((9, "before the recording's first step 10"), (16, "after the recording's last step 15: pick one in 10..15")):
        with pytest.raises(StepNotRecorded) as caught:
            reader.state_at(Step(step))
        assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_later_snapshot_resyncs_and_a_seq_gap_warns(tmp_path: Path) -> None:
    path = tmp_path / "resync.mcirec"
    resync = snapshot(step=30, seq=9)
    with RecordingWriter(path, INFO, compress=False) as writer:
        for frame in (snapshot(), delta(1, 11), delta(3, 12), resync, delta(10, 31)):
            writer.write(frame)
    seen: list[str] = []
    reader = RecordingReader(path, on_warning=seen.append)
    states = [r.state for r in reader.states()]
    assert states[3] == resync.state and states[4].step == 31
    assert len(seen) == 1 and "seq jumps from 1 to 3" in seen[0] and reader.warnings == seen


def test_first_frame_must_be_a_snapshot(tmp_path: Path) -> None:
    with RecordingWriter(tmp_path / "x.mcirec", INFO, compress=False) as writer:
        with pytest.raises(RecordingError, match="starts with a Snapshot"):
            writer.write(delta(1, 11))


@pytest.mark.parametrize("compress", COMPRESSIONS)
def test_frames_are_readable_while_the_writer_is_still_open(tmp_path: Path, compress: bool) -> None:
    # What a crash leaves: every written frame was flushed; nothing ended the file.
    path = tmp_path / "live.mcirec"
    writer = RecordingWriter(path, INFO, compress=compress)
    for frame in (snapshot(), delta(1, 11), delta(2, 12)):
        writer.write(frame)
    try:
        seen: list[str] = []
        reader = RecordingReader(path, on_warning=seen.append)
        assert [frame.seq for frame in reader] == [0, 1, 2] and reader.truncated
        assert len(seen) == 1 and "still running" in seen[0] and "partial" not in seen[0]
    finally:
        writer.close()


@pytest.mark.parametrize("compress", COMPRESSIONS)
def test_truncated_file_reads_up_to_its_last_whole_frame(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "cut.mcirec"
    frames = record(path, frames=5, compress=compress)
    whole = path.read_bytes()
    last_frame = 4 + len(msgspec.msgpack.encode(frames[-1]))
    # Raw: cuts in the end mark and inside the last frame. zstd: the last bytes hold the last
    # block and the stream's end, so a cut loses the last frame, or only the end mark.
    cuts = (len(whole) - 1, len(whole) - 4 - last_frame + 3) if not compress else (len(whole) - 30, len(whole) - 1)
    for cut in cuts:
        path.write_bytes(whole[:cut])
        seen: list[str] = []
        reader = RecordingReader(path, on_warning=seen.append)
        got = list(reader)
        assert got == frames[: len(got)] and len(got) >= len(frames) - 1
        assert reader.truncated and len(seen) == 1 and "no end mark" in seen[0] and "\n" not in seen[0]
        assert reader.state_at(got[-1].step) == expected_states(frames)[len(got) - 1]
    if not compress:
        path.write_bytes(whole[: len(whole) - 5])
        reader = RecordingReader(path)
        assert reader.state_at(Step(13)) == expected_states(frames)[3] and reader.truncated


def test_file_cut_inside_the_header(tmp_path: Path) -> None:
    path = tmp_path / "head.mcirec"
    record(path)
    path.write_bytes(path.read_bytes()[: len(MAGIC) + 6])
    with pytest.raises(RecordingCorrupt, match="inside its header"):
        RecordingReader(path)


def test_corrupt_frames_and_foreign_files(tmp_path: Path) -> None:
    path = tmp_path / "bad.mcirec"
    record(path)
    data = bytearray(path.read_bytes())
    header_end = len(MAGIC) + 4 + int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    data[header_end + 4 : header_end + 12] = b"\xff" * 8  # the first frame's msgpack
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingCorrupt) as caught:
        list(RecordingReader(path))
    assert "frame 0 does not decode" in str(caught.value) and "\n" not in str(caught.value)
    data[header_end : header_end + 4] = (0xFFFFFFFF).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingCorrupt, match="claims"):
        list(RecordingReader(path))
    path.write_bytes(b'{"type": "Snapshot"}')
    with pytest.raises(RecordingCorrupt, match="not an mcinspect recording"):
        RecordingReader(path)
    with pytest.raises(RecordingError, match="cannot read"):
        RecordingReader(tmp_path / "missing.mcirec")


@pytest.mark.skipif(not HAVE_ZSTD, reason="zstandard is not installed")
def test_corrupt_compressed_body(tmp_path: Path) -> None:
    path = tmp_path / "bad.mcirec"
    record(path, frames=5, compress=True)
    data = bytearray(path.read_bytes())
    middle = len(data) - 60
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingCorrupt) as caught:
        list(RecordingReader(path))
    assert "damaged" in str(caught.value) and "\n" not in str(caught.value)


def write_header(path: Path, **fields: object) -> None:
    header = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "compression": "none", "created_at": 0.0, "info": None, **fields}
    payload = msgspec.msgpack.encode(header)
    path.write_bytes(MAGIC + len(payload).to_bytes(4, "big") + payload)


def test_future_and_past_versions_name_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "v.mcirec"
    future_info = {**msgspec.to_builtins(INFO), "schema_version": SCHEMA_VERSION + 1, "new_field": [1, 2]}
    write_header(path, schema_version=SCHEMA_VERSION + 1, info=future_info, added_later="x")
    with pytest.raises(RecordingVersionError) as caught:
        RecordingReader(path)
    assert "newer" in str(caught.value) and "upgrade mcinspect" in str(caught.value) and "\n" not in str(caught.value)
    write_header(path, format=FORMAT + 1)
    with pytest.raises(RecordingVersionError, match="recording format"):
        RecordingReader(path)
    write_header(path, schema_version=OLDEST_READABLE_SCHEMA - 1)
    with pytest.raises(RecordingVersionError, match="older"):
        RecordingReader(path)
    write_header(path, schema_version=OLDEST_READABLE_SCHEMA)  # its messages decode as this schema's
    assert RecordingReader(path).header.schema_version == OLDEST_READABLE_SCHEMA


def test_compression_needs_zstandard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recording, "_zstd", lambda: None)
    with pytest.raises(RecordingError, match="pip install zstandard"):
        RecordingWriter(tmp_path / "z.mcirec", INFO, compress=True)
    with RecordingWriter(tmp_path / "auto.mcirec", INFO) as writer:
        assert writer.compression == "none"
    write_header(tmp_path / "z.mcirec", compression="zstd")
    with pytest.raises(RecordingError, match="pip install zstandard"):
        RecordingReader(tmp_path / "z.mcirec")


# --- snapshot files -------------------------------------------------------------------------


def test_snapshot_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    data = snapshot()
    path.write_bytes(msgspec.json.encode(data))
    assert load_snapshot(path) == data
    cases = [
        (b"{not json", SnapshotCorrupt, "not a snapshot file"),
        (msgspec.json.encode(INFO), SnapshotCorrupt, "EngineInfo message, not a Snapshot"),
        (msgspec.json.encode(data)[:-40], SnapshotCorrupt, "not a snapshot file"),
        (
            msgspec.json.encode({**msgspec.to_builtins(data), "schema_version": SCHEMA_VERSION + 1, "state": {"new": 1}}),
            SnapshotVersionError,
            "upgrade mcinspect",
        ),
        (
            msgspec.json.encode({**msgspec.to_builtins(data), "schema_version": OLDEST_READABLE_SCHEMA - 1}),
            SnapshotVersionError,
            "new snapshot",
        ),
        (msgspec.json.encode({**msgspec.to_builtins(data), "state": {"step": "x"}}), SnapshotCorrupt, "damaged snapshot"),
    ]
    for payload, error, words in cases:
        path.write_bytes(payload)
        with pytest.raises(error) as caught:
            load_snapshot(path)
        assert words in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(SnapshotFileError, match="cannot read"):
        load_snapshot(tmp_path / "missing.json")


# --- engine info across schema additions ----------------------------------------------------

FAMILY_FIELDS = ("model_family", "state_layout", "conv_shapes", "conv_dtypes", "temporal_shape", "temporal_dtype", "state_bytes_per_slot")


def test_engine_info_of_writers_before_the_family_fields_still_decodes() -> None:
    old = {key: value for key, value in msgspec.to_builtins(INFO).items() if key not in FAMILY_FIELDS}
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(old), type=EngineInfo)
    assert decoded == INFO and decoded.model_family == "" and decoded.state_bytes_per_slot == 0
    with_family = msgspec.structs.replace(
        INFO, model_family="nemotron-h", state_layout="mamba2: ...", conv_shapes=((2, 128, 3),), conv_dtypes=("bfloat16",),
        temporal_shape=(2, 4, 16, 16), temporal_dtype="float32", state_bytes_per_slot=9728,
    )  # fmt: skip
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(with_family), type=EngineInfo) == with_family
    assert msgspec.json.decode(msgspec.json.encode(with_family), type=EngineInfo) == with_family
