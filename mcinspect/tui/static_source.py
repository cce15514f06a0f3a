"""A DataSource over a fixed list of states built in memory (the responsiveness benchmark), and
the FrameMeta of frames that did not come through a Session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..schema import CacheState, Counters, Delta, EngineInfo, Event, NodeId, Seq, Step, VerifyStats
from ..verify_command import Judged, VerifyError  # imports no client: replays stay free of zmq
from .source import FrameGone, FrameMeta, NodeChanges, SourceHealth


@dataclass(frozen=True)
class StaticFrame:
    """A FrameMeta for states that did not come through a Session."""

    index: int
    seq: Seq
    step: Step
    received_at: float
    events: tuple[Event, ...] = ()
    resync: bool = False
    engine: Counters = Counters()


@dataclass
class StaticSource:
    """A fixed list of states, one frame each."""

    states: Sequence[CacheState]
    changes: Sequence[NodeChanges | None] = ()
    """Per state, its node changes relative to the state before (optional)."""
    name: str = "replay"
    live: bool = False
    _frames: list[StaticFrame] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._frames = [
            StaticFrame(index=i, seq=Seq(i + 1), step=state.step, received_at=0.0, resync=i == 0) for i, state in enumerate(self.states)
        ]

    def start(self, notify: Callable[[], None]) -> None:
        notify()

    def close(self) -> None:
        pass

    def engine(self) -> EngineInfo | None:
        return None

    def verify(self, nodes: list[NodeId]) -> list[Judged]:
        raise VerifyError("verifying a state needs the live engine: `mcinspect attach PORT`, then V")

    def verifier(self) -> VerifyStats | None:
        return None

    def health(self) -> SourceHealth:
        return SourceHealth(status="replay")

    def frames(self) -> Sequence[FrameMeta]:
        return self._frames

    def state_at(self, index: int) -> CacheState:
        if not 0 <= index < len(self.states):
            raise FrameGone(f"frame {index} is not in the replay")
        return self.states[index]

    def node_changes(self, index: int) -> NodeChanges | None:
        return self.changes[index] if 0 <= index < len(self.changes) else None

    def delta_at(self, index: int) -> Delta | None:
        return None
