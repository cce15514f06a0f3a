"""Recordings: a session's snapshot and deltas in one file, to replay, diff and attach to a bug.

Layout (integers big-endian):

    MAGIC (8 bytes)
    u32 length + msgpack RecordingHeader          always uncompressed, so any reader can say
                                                  what the file is and which version wrote it
    body: frames, then an end mark; raw or one zstd stream (RecordingHeader.compression)
    frame: u32 length + msgpack Snapshot | Delta  the first is a Snapshot; a later Snapshot is a
                                                  resync and replaces the state
    end mark: u32 0                               written by close()

Reading trusts nothing: a frame is at most `untrusted.max_message_bytes()` (what a client takes
off the wire), the body is decompressed a few MB at a time, so a zstd bomb costs one frame's
bound, and nesting, truncation or garbage in the header or a frame is RecordingCorrupt.

The writer flushes after every frame (zstd: a block flush), so a crashed writer loses at most
the frame it was writing. A file without its end mark (a writer that crashed, or one still
running) is read up to its last whole frame, with a warning (`warnings`, `on_warning`) and
`truncated` set. zstd is used when the `zstandard` module is importable.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal, cast

import msgspec

from .errors import McinspectError, one_line
from .replay import Frame, Replay
from .schema import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION, CacheState, Delta, EngineInfo, Snapshot, Step, copy_state
from .untrusted import DecodeFailed, decode, max_message_bytes

MAGIC = b"\x89MCIREC\n"
"""Not text, and a line ending that text-mode copies would mangle (the PNG trick)."""
FORMAT = 1
"""Version of the container layout above (the messages inside carry SCHEMA_VERSION)."""
_READ_CHUNK = 16 << 20
_DECOMPRESSED_CHUNK = 4 << 20
"""What one zstd step may produce: a file that expands a thousandfold is held a frame at a time."""
_END_MARK = (0).to_bytes(4, "big")
"""A zero length: no frame is empty."""

Compression = Literal["none", "zstd"]


class RecordingError(McinspectError):
    """A recording cannot be used; the message is one line that names the fix."""


class RecordingCorrupt(RecordingError):
    """The file is not a recording, or a whole frame in it does not decode."""


class RecordingVersionError(RecordingError):
    """The file was written by another version of mcinspect."""


class StepNotRecorded(RecordingError, LookupError):
    """The recording does not cover the step asked for."""


class RecordingHeader(msgspec.Struct, frozen=True):
    format: int
    schema_version: int
    compression: Compression
    created_at: float
    """Unix time the writer started."""
    info: EngineInfo | None
    """The engine recorded, when known."""


class _HeaderProbe(msgspec.Struct):
    """Header fields read before the versions are checked; `info` stays raw because a future
    EngineInfo may not decode here."""

    format: int
    schema_version: int
    compression: str = "none"
    created_at: float = 0.0
    info: msgspec.Raw = msgspec.Raw(b"\xc0")
    """msgpack nil when the writer had no EngineInfo."""


@dataclass(frozen=True)
class RecordedState:
    """The state after one frame."""

    index: int
    """Frame number, 0 for the first snapshot."""
    frame: Frame
    state: CacheState
    """A copy the caller owns (node, slot and request records are shared and immutable)."""

    @property
    def step(self) -> Step:
        return self.state.step


def _zstd() -> Any:
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


class RecordingWriter:
    """Append frames to a new recording at `path` (replaced if it exists)."""

    def __init__(self, path: str | os.PathLike[str], info: EngineInfo | None, *, compress: bool | None = None) -> None:
        """`compress`: None uses zstd when importable; True requires it (RecordingError otherwise)."""
        zstd = _zstd()
        if compress and zstd is None:
            raise RecordingError("zstd compression needs the zstandard module: `pip install zstandard`, or record uncompressed")
        self.compression: Compression = "zstd" if zstd is not None and compress is not False else "none"
        self.path = os.fspath(path)
        self.frames = 0
        self._file: IO[bytes] = open(self.path, "wb")
        header = RecordingHeader(FORMAT, SCHEMA_VERSION, self.compression, time.time(), info)
        self._file.write(MAGIC + _framed(_encoder.encode(header)))
        self._file.flush()
        self._body: Any = self._file
        self._flush_block: Any = None
        if self.compression == "zstd":
            self._body = zstd.ZstdCompressor(level=3).stream_writer(self._file, closefd=False)
            self._flush_block = zstd.FLUSH_BLOCK

    def write(self, frame: Frame) -> None:
        """Append one frame and flush it to the OS. The first frame must be a Snapshot."""
        if self.frames == 0 and not isinstance(frame, Snapshot):
            raise RecordingError("a recording starts with a Snapshot: write the session's snapshot first")
        self._body.write(_framed(_encoder.encode(frame)))
        if self._flush_block is not None:
            self._body.flush(self._flush_block)
        self._file.flush()
        self.frames += 1

    def close(self) -> None:
        if self._file.closed:
            return
        self._body.write(_END_MARK)
        if self._body is not self._file:
            self._body.close()  # ends the zstd frame
        self._file.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _framed(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


_encoder = msgspec.msgpack.Encoder()
_frame_decoder = msgspec.msgpack.Decoder(Frame)
_info_decoder = msgspec.msgpack.Decoder(EngineInfo)
_header_probe = msgspec.msgpack.Decoder(_HeaderProbe)
MAX_HEADER_BYTES = 1 << 20
"""A header is a few hundred bytes."""
_MSGPACK_NIL = b"\xc0"


def frame_step(frame: Frame) -> Step:
    return frame.step if isinstance(frame, Delta) else frame.state.step


class RecordingReader:
    """Read a recording: the header on construction, frames and states by streaming the file.

    A truncated tail (a writer that died mid-frame) ends the frames with a warning: appended
    to `warnings`, passed to `on_warning`, and `truncated` set. Raises RecordingCorrupt,
    RecordingVersionError, or RecordingError when the file cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str], *, on_warning: Callable[[str], None] | None = None) -> None:
        self.path = os.fspath(path)
        self.on_warning = on_warning
        self.warnings: list[str] = []
        self.truncated = False
        with self._open() as handle:
            self.header, self._body_offset = self._read_header(handle)
        self.info = self.header.info

    def __iter__(self) -> Iterator[Frame]:
        """Frames in file order (checked: a Snapshot first, then Snapshots or Deltas)."""
        self.truncated = False
        zstd = _zstd() if self.header.compression == "zstd" else None
        stream_errors = (zstd.ZstdError,) if zstd is not None else ()
        limit = max_message_bytes()
        with self._open() as handle:
            handle.seek(self._body_offset)
            body: IO[bytes] | _ZstdBody = _ZstdBody(handle, zstd) if zstd is not None else handle
            index = 0
            while True:
                try:
                    prefix = _read_exact(body, 4)
                    length = int.from_bytes(prefix, "big")
                    if len(prefix) == 4 and length > limit:
                        raise RecordingCorrupt(
                            f"{self.path}: frame {index} claims {length:,} bytes, over the {limit:,}-byte limit: the file is "
                            "damaged (or set MCINSPECT_MAX_MESSAGE_MB higher)"
                        )
                    payload = _read_exact(body, length) if len(prefix) == 4 else b""
                except stream_errors as exc:
                    raise RecordingCorrupt(f"{self.path}: frame {index}: {one_line(exc)}: the file is damaged") from None
                if prefix == _END_MARK:
                    return
                if len(prefix) < 4 or len(payload) < length:
                    self._truncated(index, len(prefix) + len(payload))
                    return
                frame = self._decode(payload, index)
                if index == 0 and not isinstance(frame, Snapshot):
                    raise RecordingCorrupt(f"{self.path}: frame 0 is a {type(frame).__name__}, not a Snapshot: the file is damaged")
                yield frame
                index += 1

    def states(self) -> Iterator[RecordedState]:
        """The state after each frame (a copy per frame, O(nodes) each: `state_at` copies once)."""
        replay = Replay(self._warn, self.path)
        for index, frame in enumerate(self):
            yield RecordedState(index, frame, copy_state(replay.apply(index, frame)))

    def last_state(self) -> RecordedState:
        """The state after the last whole frame (one copy); raises StepNotRecorded if none."""
        replay = Replay(self._warn, self.path)
        last: tuple[int, Frame] | None = None
        for index, frame in enumerate(self):
            replay.apply(index, frame)
            last = index, frame
        if last is None or replay.state is None:
            raise StepNotRecorded(f"{self.path} holds no whole frame: nothing to replay")
        return RecordedState(last[0], last[1], copy_state(replay.state))

    def state_at(self, step: Step) -> CacheState:
        """The state at the end of `step`: after the last frame whose step is <= `step`."""
        return self.states_at([step])[0]

    def states_at(self, steps: Sequence[Step]) -> list[CacheState]:
        """`state_at` for several steps in one pass over the file. Raises StepNotRecorded."""
        wanted = sorted(set(steps))
        found: dict[Step, CacheState] = {}
        replay = Replay(self._warn, self.path)
        first: Step | None = None
        last: Step | None = None
        for index, frame in enumerate(self):
            step = frame_step(frame)
            if first is None:
                first = step
                if wanted and wanted[0] < first:
                    raise StepNotRecorded(f"step {wanted[0]} is before the recording's first step {first}: pick a later one")
            # Wanted steps before this frame's step are answered by the state before it.
            while wanted and replay.state is not None and wanted[0] < step:
                found[wanted.pop(0)] = copy_state(replay.state)
            if not wanted:
                break
            replay.apply(index, frame)
            last = step
        if first is None or last is None or replay.state is None:
            raise StepNotRecorded(f"{self.path} holds no whole frame: nothing to replay")
        for step in wanted:
            if step > last:
                raise StepNotRecorded(f"step {step} is after the recording's last step {last}: pick one in {first}..{last}")
            found[step] = copy_state(replay.state)
        return [found[step] for step in steps]

    def _open(self) -> IO[bytes]:
        try:
            return open(self.path, "rb")
        except OSError as exc:
            raise RecordingError(f"cannot read {self.path}: {exc.strerror}") from None

    def _read_header(self, handle: IO[bytes]) -> tuple[RecordingHeader, int]:
        if handle.read(len(MAGIC)) != MAGIC:
            raise RecordingCorrupt(f"{self.path} is not an mcinspect recording (no magic): record one with `mcinspect record`")
        prefix = handle.read(4)
        length = int.from_bytes(prefix, "big") if len(prefix) == 4 else -1
        raw = handle.read(length) if 0 <= length <= MAX_HEADER_BYTES else b""
        if length < 0 or len(raw) != length:
            raise RecordingCorrupt(f"{self.path} ends inside its header: nothing was recorded")
        try:
            probe = decode(_header_probe, raw, DecodeFailed)
        except DecodeFailed as exc:
            raise RecordingCorrupt(f"{self.path}: the header does not decode ({exc}): the file is damaged") from None
        checked = (
            ("recording format", probe.format, FORMAT, FORMAT),
            ("schema version", probe.schema_version, OLDEST_READABLE_SCHEMA, SCHEMA_VERSION),
        )
        for what, theirs, oldest, ours in checked:
            if theirs > ours:
                raise RecordingVersionError(f"{self.path} has {what} {theirs}, newer than this mcinspect's {ours}: upgrade mcinspect")
            if theirs < oldest:
                raise RecordingVersionError(
                    f"{self.path} has {what} {theirs}, older than the oldest this mcinspect reads ({oldest}): replay it with the mcinspect that wrote it"
                )
        if probe.compression not in ("none", "zstd"):
            raise RecordingCorrupt(f"{self.path}: unknown compression {probe.compression!r}: the file is damaged")
        if probe.compression == "zstd" and _zstd() is None:
            raise RecordingError(f"{self.path} is zstd-compressed: `pip install zstandard` to read it")
        try:
            info = None if bytes(probe.info) == _MSGPACK_NIL else decode(_info_decoder, probe.info, DecodeFailed)
        except DecodeFailed as exc:
            raise RecordingCorrupt(f"{self.path}: the header's engine info does not decode ({exc}): the file is damaged") from None
        compression = cast(Compression, probe.compression)
        return RecordingHeader(probe.format, probe.schema_version, compression, probe.created_at, info), handle.tell()

    def _decode(self, payload: bytes, index: int) -> Frame:
        enabled = gc.isenabled()
        gc.disable()  # as schema.decode_reply: snapshots are millions of acyclic records
        try:
            return decode(_frame_decoder, payload, DecodeFailed)
        except DecodeFailed as exc:
            raise RecordingCorrupt(f"{self.path}: frame {index} does not decode ({exc}): the file is damaged") from None
        finally:
            if enabled:
                gc.enable()

    def _truncated(self, index: int, partial: int) -> None:
        self.truncated = True
        dropped = f", dropped a partial frame ({partial:,} bytes)" if partial else ""
        self._warn(f"{self.path} has no end mark (its writer crashed or is still running): read {index} whole frames{dropped}")

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        if self.on_warning is not None:
            self.on_warning(message)


class _ZstdBody:
    """Decompressed reads of a zstd stream that may lack its end (a writer still running, or
    one that crashed), at most _DECOMPRESSED_CHUNK produced per step: memory follows what is
    asked for, not what the file expands to. (zstandard's stream_reader stops short of the last
    flushed block of an unfinished frame; read_to_iter hands out everything flushed.)"""

    def __init__(self, handle: IO[bytes], zstd: Any) -> None:
        self._chunks = zstd.ZstdDecompressor().read_to_iter(handle, read_size=1 << 20, write_size=_DECOMPRESSED_CHUNK)
        self._buffer = bytearray()

    def read(self, count: int) -> bytes:
        while len(self._buffer) < count:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._buffer += chunk
        out = bytes(self._buffer[:count])
        del self._buffer[:count]  # amortised O(1): bytearray drops its front without moving the rest
        return out


def _read_exact(stream: IO[bytes] | _ZstdBody, count: int) -> bytes:
    """Up to `count` bytes, fewer only at the end; read in chunks so a damaged length cannot
    allocate gigabytes before the end of the file is found."""
    parts = []
    left = count
    while left > 0:
        chunk = stream.read(min(left, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
