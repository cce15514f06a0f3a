"""A recording served through the engine side's real transport (engine_hooks' RequestServer and
Publisher): what the attach tests connect to instead of an engine."""

from __future__ import annotations

from pathlib import Path

import msgspec

from mcinspect.recording import RecordingReader
from mcinspect.schema import SCHEMA_VERSION, Delta, Snapshot, Stats
from mcinspect_engine_hooks.publisher import Publisher
from mcinspect_engine_hooks.server import RequestServer

RECORDINGS = Path(__file__).parent.parent / "tui" / "recordings"
"""The committed recordings of the embedded engine (scripts/make-tui-recordings.sh)."""


class RecordedEngine:
    """A recording served through the engine side's real transport (engine_hooks' RequestServer
    and Publisher): its first frame as the snapshot, its deltas published on demand."""

    def __init__(self, name: str, port: int = 0, host: str = "127.0.0.1") -> None:
        """`port`: its request port on `host` (the stream on the next one), else any free one."""
        reader = RecordingReader(RECORDINGS / f"{name}.mcrec")
        # Served as this schema's engine serves them: a recording of an older readable schema
        # decodes into this one's messages, its version field aside.
        first, *self.deltas = (msgspec.structs.replace(frame, schema_version=SCHEMA_VERSION) for frame in reader)
        assert isinstance(first, Snapshot) and all(isinstance(d, Delta) for d in self.deltas)
        self.snapshot = first
        self.publisher = Publisher(host, port + 1 if port else 0)
        assert reader.info is not None
        info = msgspec.structs.replace(reader.info, schema_version=SCHEMA_VERSION, request_port=port, stream_port=self.publisher.port)
        self.server = RequestServer(
            host, port, token="", info=info, snapshot=lambda: first, history=self.publisher.history_after, stats=self._stats
        )
        self.port = self.server.port
        self.publisher.start()
        self.server.start()

    def _stats(self) -> Stats:
        return Stats(
            schema_version=SCHEMA_VERSION, step=self.snapshot.state.step, mamba_pool_size=len(self.snapshot.state.slots),
            mamba_slots_in_use=0, mamba_slots_peak=0, evicted_mamba_slots=0, evicted_tokens=0, hook_errors=0,
            slots_per_request={}, example_layouts=[],
        )  # fmt: skip

    def publish_rest(self) -> None:
        for delta in self.deltas:
            self.publisher.publish(delta)

    def stop(self) -> None:
        self.server.close()
        self.publisher.close()
