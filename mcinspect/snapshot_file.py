"""Reading a snapshot file (`mcinspect snapshot -o FILE`: `msgspec.json.encode(Snapshot)`).

The schema version is read before the rest is decoded, so a file from another mcinspect version
gets a message about versions rather than a field-by-field decode error.
"""

from __future__ import annotations

import gc
import os

import msgspec

from .errors import McinspectError
from .schema import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION, Snapshot
from .untrusted import DecodeFailed, decode, max_message_bytes

JSON_EXPANSION = 4
"""A snapshot's JSON is ~3x its msgpack: files up to this times the message limit are read."""


class SnapshotFileError(McinspectError):
    """A snapshot file cannot be used; the message is one line that names the fix."""


class SnapshotCorrupt(SnapshotFileError):
    """The file is not a readable snapshot (not JSON, another message, fields missing)."""


class SnapshotVersionError(SnapshotFileError):
    """The file was written with another schema version."""


class _Probe(msgspec.Struct):
    """The two fields every snapshot file of any version has; the rest is left undecoded."""

    type: str = ""
    schema_version: int | None = None


_probe = msgspec.json.Decoder(_Probe)
_decoder = msgspec.json.Decoder(Snapshot)


def load_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Read and check a snapshot file. Raises SnapshotCorrupt, SnapshotVersionError, or
    SnapshotFileError when it cannot be read."""
    limit = JSON_EXPANSION * max_message_bytes()
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise SnapshotFileError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > limit:
        raise SnapshotCorrupt(f"{path} is over {limit:,} bytes: no snapshot is (or set MCINSPECT_MAX_MESSAGE_MB higher)")
    return parse_snapshot(data, str(path))


def parse_snapshot(data: bytes, name: str = "snapshot") -> Snapshot:
    """`load_snapshot` for bytes already read (`name` is used in messages)."""
    try:
        probe = decode(_probe, data, DecodeFailed)
    except DecodeFailed as exc:
        raise SnapshotCorrupt(f"{name} is not a snapshot file ({exc}): write one with `mcinspect snapshot PORT -o FILE`") from None
    if probe.type != "Snapshot":
        what = f"a {probe.type} message" if probe.type else "no message type"
        raise SnapshotCorrupt(f"{name} holds {what}, not a Snapshot: write one with `mcinspect snapshot PORT -o FILE`")
    version = probe.schema_version
    if version is None or not OLDEST_READABLE_SCHEMA <= version <= SCHEMA_VERSION:
        if version is not None and version > SCHEMA_VERSION:
            fix = "upgrade mcinspect to read it"
        else:
            fix = "read it with the mcinspect that wrote it, or take a new snapshot"
        raise SnapshotVersionError(
            f"{name} has schema version {version}, this mcinspect reads {OLDEST_READABLE_SCHEMA} to {SCHEMA_VERSION}: {fix}"
        )
    # Same reason as schema.decode_reply: millions of acyclic records, collections would triple the time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return decode(_decoder, data, DecodeFailed)
    except DecodeFailed as exc:
        raise SnapshotCorrupt(f"{name} is a damaged snapshot ({exc}): take a new one") from None
    finally:
        if enabled:
            gc.enable()
