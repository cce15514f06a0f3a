"""A DataSource over a recording: its frames in memory, states rebuilt on demand.

Holding every step's full state would cost a state per frame (100k nodes x 1,000 frames is
gigabytes); this keeps the recording's deltas and a keyframe every KEYFRAME_EVERY frames (a
shallow copy: records are shared), as a Session does, and rebuilds a frame from the keyframe
before it plus at most KEYFRAME_EVERY - 1 deltas.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from ..schema import copy_state
from ..schema import CacheState, Delta, EngineInfo, Seq, Snapshot, Step, apply_delta
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
        self._keyframes: dict[int, CacheState] = {}
        self._keyframe_at: list[int] = []
        """Sorted frame indices that hold a keyframe."""
        state: CacheState | None = None
        for index, frame in enumerate(self._frames):
            if isinstance(frame, Snapshot):
                state = copy_state(frame.state)
            else:
                assert state is not None, "a recording starts with a Snapshot"
                apply_delta(state, frame)
            if isinstance(frame, Snapshot) or index % KEYFRAME_EVERY == 0:
                self._keyframes[index] = copy_state(state)
                self._keyframe_at.append(index)
            self._metas.append(
                StaticFrame(
                    index=index,
                    seq=Seq(frame.seq),
                    step=Step(state.step),
                    received_at=0.0,  # recordings keep no wall-clock time per frame
                    events=tuple(frame.events) if isinstance(frame, Delta) else (),
                    resync=isinstance(frame, Snapshot),
                    engine=frame.counters,
                )
            )

    def start(self, notify: Callable[[], None]) -> None:
        notify()

    def close(self) -> None:
        pass

    def engine(self) -> EngineInfo | None:
        return self._info

    def health(self) -> SourceHealth:
        return SourceHealth(status="replay")

    def frames(self) -> Sequence[FrameMeta]:
        return self._metas

    def state_at(self, index: int) -> CacheState:
        if not 0 <= index < len(self._frames):
            raise FrameGone(f"frame {index} is not in the recording")
        base = self._keyframe_at[bisect.bisect_right(self._keyframe_at, index) - 1]
        state = copy_state(self._keyframes[base])
        for frame in self._frames[base + 1 : index + 1]:
            assert isinstance(frame, Delta)  # every Snapshot is a keyframe
            apply_delta(state, frame)
        return state

    def node_changes(self, index: int) -> NodeChanges | None:
        return NodeChanges.of(self._frames[index]) if 0 <= index < len(self._frames) else None
