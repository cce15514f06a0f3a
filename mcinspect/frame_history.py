"""The bounded history a Session keeps for time travel.

The last `size` frames, one per applied delta or resync. Each frame keeps its delta (what
changed, and the step's events); every `keyframe_every` frames one keeps a shallow copy of the
whole state too (its dicts of references: node, slot and request records are immutable and
shared between frames). `state_at` rebuilds a frame from the nearest keyframe before it plus at
most `keyframe_every - 1` deltas. Memory: the deltas of the window plus at most
ceil(size / keyframe_every) + 1 shallow copies. A resync enters the history as the delta
between the previous state and the snapshot (`delta_towards`), so it shares records as well
(only a snapshot no delta can reach, e.g. a restarted engine with fewer slots, is a keyframe).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .schema import SCHEMA_VERSION, CacheState, Delta, Snapshot, apply_delta, copy_state


class Indexed(Protocol):
    """What the history needs of a frame's description: its consecutive frame number."""

    @property
    def index(self) -> int: ...


InfoT = TypeVar("InfoT", bound=Indexed)


class FrameEvicted(LookupError):
    """The frame asked for has left the bounded history (or never existed)."""


@dataclass
class _Entry(Generic[InfoT]):
    info: InfoT
    delta: Delta | None
    """How to get here from the previous entry; None where a snapshot began (`keyframe` then
    holds the whole state)."""
    keyframe: CacheState | None


class FrameHistory(Generic[InfoT]):
    """Bounded frames with periodic keyframes (see the module docstring); the Session's window,
    and a whole recording in the TUI's replay source."""

    def __init__(self, size: int, keyframe_every: int) -> None:
        self.entries: deque[_Entry[InfoT]] = deque()
        self._size = size
        self._keyframe_every = keyframe_every
        self._since_keyframe = 0

    def append(self, info: InfoT, delta: Delta | None, live: CacheState) -> None:
        """Record the frame whose state is `live`; `delta` None forces a keyframe."""
        if len(self.entries) >= self._size:
            self._evict_oldest()
        if delta is None or not self.entries or self._since_keyframe + 1 >= self._keyframe_every:
            self.entries.append(_Entry(info, delta, copy_state(live)))
            self._since_keyframe = 0
        else:
            self.entries.append(_Entry(info, delta, None))
            self._since_keyframe += 1

    def _evict_oldest(self) -> None:
        oldest = self.entries.popleft()
        if self.entries and self.entries[0].keyframe is None:
            # The new oldest frame must carry a keyframe: roll the evicted one forward (only the
            # history holds keyframes; readers get copies, so editing it in place is safe).
            successor = self.entries[0]
            assert oldest.keyframe is not None and successor.delta is not None
            apply_delta(oldest.keyframe, successor.delta)
            successor.keyframe = oldest.keyframe

    def frame_at(self, index: int) -> tuple[InfoT, Delta | None]:
        """Frame `index`'s info, and the delta that made it of the frame before it (None: a
        snapshot began there); raises FrameEvicted outside the window."""
        entry = self.entries[self._position(index)]
        return entry.info, entry.delta

    def state_at(self, index: int) -> CacheState:
        position = self._position(index)
        base = position
        while self.entries[base].keyframe is None:
            base -= 1
        keyframe = self.entries[base].keyframe
        assert keyframe is not None
        state = copy_state(keyframe)
        for i in range(base + 1, position + 1):
            delta = self.entries[i].delta
            assert delta is not None
            apply_delta(state, delta)
        return state

    def _position(self, index: int) -> int:
        if not self.entries or not 0 <= index - self.entries[0].info.index < len(self.entries):
            raise FrameEvicted(f"frame {index} is not in the history")
        return index - self.entries[0].info.index


def delta_towards(old: CacheState, snapshot: Snapshot) -> Delta:
    """The delta from `old` towards the snapshot's state (the inverse of apply_delta).

    apply_delta cannot remove slots, so this is exact only when none went away;
    the caller checks the result and keeps a keyframe when it is not."""
    new = snapshot.state
    return Delta(
        schema_version=SCHEMA_VERSION,
        seq=snapshot.seq,
        step=new.step,
        upsert_nodes=[n for k, n in new.nodes.items() if old.nodes.get(k) != n],
        removed_nodes=[k for k in old.nodes if k not in new.nodes],
        slots={k: v for k, v in new.slots.items() if old.slots.get(k) != v},
        upsert_requests=[r for k, r in new.requests.items() if old.requests.get(k) != r],
        removed_requests=[k for k in old.requests if k not in new.requests],
        kv=new.kv if new.kv != old.kv else None,
        events=[],
        counters=snapshot.counters,
        contents={k: v for k, v in new.contents.items() if old.contents.get(k) != v},
        removed_contents=[k for k in old.contents if k not in new.contents],
    )
