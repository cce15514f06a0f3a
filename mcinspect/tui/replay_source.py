"""A DataSource over a recording: its frames in memory, states rebuilt on demand.

Holding every step's full state would cost a state per frame (100k nodes x 1,000 frames is
gigabytes); the frames go through the one replay path (replay.py) into a FrameHistory as a
Session's do: the deltas and a keyframe every KEYFRAME_EVERY frames (a shallow copy: records
are shared), so a frame is rebuilt from the keyframe before it plus at most
KEYFRAME_EVERY - 1 deltas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..frame_history import FrameEvicted, FrameHistory
from ..replay import Replay
from ..schema import CacheState, Delta, EngineInfo, NodeId, Seq, Snapshot, Step, VerifyStats
from ..verify_command import Judged, VerifyError  # imports no client: replays stay free of zmq
from .source import FrameGone, FrameMeta, NodeChanges, SourceHealth
from .static_source import StaticFrame

KEYFRAME_EVERY = 50
"""Frames between keyframes: the most deltas one `state_at` applies."""


class ReplaySource:
    """Frames of a recording (a Snapshot first, then Deltas and resync Snapshots)."""

    live = False

    def __init__(self, frames: Sequence[Delta | Snapshot], info: EngineInfo | None, name: str) -> None:
        self.name = name
        self._info = info
        self._frames = list(frames)
        self._metas: list[StaticFrame] = []
        self._history: FrameHistory[StaticFrame] = FrameHistory(max(1, len(self._frames)), KEYFRAME_EVERY)
        replay = Replay(name=name)
        for index, frame in enumerate(self._frames):
            state = replay.apply(index, frame)
            meta = StaticFrame(
                index=index,
                seq=Seq(frame.seq),
                step=Step(state.step),
                received_at=0.0,  # recordings keep no wall-clock time per frame
                events=tuple(frame.events) if isinstance(frame, Delta) else (),
                resync=isinstance(frame, Snapshot),
                engine=frame.counters,
            )
            self._metas.append(meta)
            self._history.append(meta, frame if isinstance(frame, Delta) else None, state)

    def start(self, notify: Callable[[], None]) -> None:
        notify()

    def close(self) -> None:
        pass

    def engine(self) -> EngineInfo | None:
        return self._info

    def verify(self, nodes: list[NodeId]) -> list[Judged]:
        raise VerifyError("verifying a state needs the live engine: `mcinspect attach PORT`, then V")

    def verifier(self) -> VerifyStats | None:
        return None

    def health(self) -> SourceHealth:
        return SourceHealth(status="replay")

    def frames(self) -> Sequence[FrameMeta]:
        return self._metas

    def state_at(self, index: int) -> CacheState:
        try:
            return self._history.state_at(index)
        except FrameEvicted:
            raise FrameGone(f"frame {index} is not in the recording") from None

    def node_changes(self, index: int) -> NodeChanges | None:
        return NodeChanges.of(self._frames[index]) if 0 <= index < len(self._frames) else None

    def delta_at(self, index: int) -> Delta | None:
        frame = self._frames[index] if 0 <= index < len(self._frames) else None
        return frame if isinstance(frame, Delta) else None
