"""Where the inspector's states come from: the `DataSource` interface and what it hands out.

The app sees one small interface, so the same screens run on a live engine (`SessionSource`)
and on fixed frames (`ReplaySource`: a recording; `StaticSource`: states built in memory). A
source never blocks the UI: `start(notify)` hands the network to a thread, and `notify` (called
from that thread) only tells the app that something changed; the app then reads `frames()` /
`state_at()` / `health()`, which return at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..schema import CacheState, Counters, Delta, EngineInfo, Event, NodeId, Snapshot, VerifyStats, apply_delta, copy_state

if TYPE_CHECKING:
    from ..verify_command import Judged


class FrameMeta(Protocol):
    """One step as a source saw it; `mcinspect.session.FrameInfo` has this shape."""

    @property
    def index(self) -> int:
        """Source-local frame number, consecutive."""

    @property
    def seq(self) -> int: ...

    @property
    def step(self) -> int: ...

    @property
    def received_at(self) -> float:
        """Wall-clock time the frame arrived."""

    @property
    def events(self) -> tuple[Event, ...]:
        """What happened during the step."""

    @property
    def resync(self) -> bool:
        """The frame came from a snapshot: steps before it may be missing."""

    @property
    def engine(self) -> Counters:
        """The hooks' counters as of this frame."""


class FrameGone(LookupError):
    """The frame asked for has left the source's bounded history."""


DELTAS_WALKED = 100
"""The most frames a state is moved forward by their deltas (`deltas_between`); past that the
source rebuilds it (a session keeps a keyframe every 100 frames)."""


def deltas_between(source: DataSource, start: int, end: int) -> list[Delta] | None:
    """The deltas that take frame `start`'s state to frame `end`'s (`start` <= `end`), where the
    source has every one and there are at most DELTAS_WALKED; None otherwise."""
    if not 0 <= end - start <= DELTAS_WALKED:
        return None
    deltas = []
    for index in range(start + 1, end + 1):
        delta = source.delta_at(index)
        if delta is None:
            return None
        deltas.append(delta)
    return deltas


def moved_by(state: CacheState, deltas: Sequence[Delta]) -> CacheState:
    """A copy of `state` (which stays as it is) moved by `deltas` in turn."""
    moved = copy_state(state)
    for delta in deltas:
        apply_delta(moved, delta)
    return moved


@dataclass(frozen=True)
class NodeChanges:
    """The tree nodes one frame's delta upserted and removed (what the frame before it lacks)."""

    upserted: tuple[NodeId, ...]
    removed: tuple[NodeId, ...]

    @classmethod
    def of(cls, frame: Delta | Snapshot) -> NodeChanges | None:
        """A delta's node changes; None for a snapshot (it may change anything)."""
        if isinstance(frame, Snapshot):
            return None
        return cls(tuple(node.id for node in frame.upsert_nodes), tuple(frame.removed_nodes))

    def reversed(self) -> NodeChanges:
        """The same frame's changes read backwards (the frame before it, seen from it): what it
        upserted or removed differs, and what it added is gone."""
        return NodeChanges(self.upserted + self.removed, self.upserted)

    @classmethod
    def across(cls, deltas: Sequence[Delta]) -> NodeChanges:
        """The node changes of several frames in a row, as one (a node may be named by both)."""
        upserted = dict.fromkeys(node.id for delta in deltas for node in delta.upsert_nodes)
        removed = dict.fromkeys(node_id for delta in deltas for node_id in delta.removed_nodes)
        return cls(tuple(upserted), tuple(removed))


@dataclass(frozen=True)
class SourceHealth:
    """What the header shows about the connection."""

    status: str
    """One of "connecting", "connected", "disconnected", "replay"."""
    dropped: int = 0
    """Deltas the engine's queue could not take."""
    gaps: int = 0
    resyncs: int = 0
    hook_errors: int = 0
    last_error: str = ""

    @property
    def connected(self) -> bool:
        return self.status in ("connected", "replay")


class DataSource(Protocol):
    """The inspector's view of a stream of cache states."""

    live: bool
    """New frames may arrive (attach) rather than a fixed list (replay)."""
    name: str
    """Shown in the header: HOST:PORT or a file name."""

    def start(self, notify: Callable[[], None]) -> None:
        """Begin delivering frames; `notify` may be called from any thread."""

    def close(self) -> None: ...

    def engine(self) -> EngineInfo | None: ...

    def health(self) -> SourceHealth: ...

    def frames(self) -> Sequence[FrameMeta]:
        """Frames still held, oldest first."""

    def state_at(self, index: int) -> CacheState:
        """The state at frame `index` (read-only); raises FrameGone outside the window."""

    def node_changes(self, index: int) -> NodeChanges | None:
        """What frame `index` changed in the tree relative to frame `index - 1`, if known
        (it saves the views a scan of every node)."""

    def delta_at(self, index: int) -> Delta | None:
        """The stream delta that made frame `index` of frame `index - 1`, where one did (None:
        a snapshot or resync frame, or not kept); it saves the checks a pass over the state."""

    def verify(self, nodes: list[NodeId]) -> list[Judged]:
        """Ask the engine to recompute these nodes' states now (T2); blocks: call from a worker.
        Raises a McinspectError where there is no engine to ask (a recording)."""

    def verifier(self) -> VerifyStats | None:
        """The engine's T2 verifier counts (blocks: call from a worker); None without an engine."""
