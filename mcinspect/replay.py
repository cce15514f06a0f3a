"""The one way frames become states: a Snapshot, then Deltas in seq order, a later Snapshot a
resync that replaces everything. Used by recordings (reading, `check`, `diff`, `render`), the
TUI's replay source and the checks' driver; a Session applies the same rule to the stream,
with gaps closed from the engine (session.py), and keeps its history in a FrameHistory.
"""

from __future__ import annotations

from collections.abc import Callable

from .schema import CacheState, Delta, Snapshot, apply_delta, copy_state

Frame = Snapshot | Delta


class ReplayError(ValueError):
    """Frames out of order: a Delta before any Snapshot."""


class Replay:
    """One live state, advanced frame by frame (mutated in place: copy what you keep)."""

    def __init__(self, warn: Callable[[str], None] = lambda message: None, name: str = "frames") -> None:
        """`warn` hears of seq jumps (states after one may miss changes); `name` prefixes it."""
        self.state: CacheState | None = None
        self.last_seq: int | None = None
        self._warn, self._name = warn, name

    def apply(self, index: int, frame: Frame) -> CacheState:
        """The state after frame number `index`."""
        if isinstance(frame, Snapshot):
            self.state = copy_state(frame.state)
        else:
            if self.state is None:
                raise ReplayError(f"{self._name}: frame {index} is a Delta with no Snapshot before it")
            if self.last_seq is not None and frame.seq != self.last_seq + 1:
                self._warn(
                    f"{self._name}: seq jumps from {self.last_seq} to {frame.seq} at frame {index}: states after it may miss changes"
                )
            apply_delta(self.state, frame)
        self.last_seq = frame.seq
        return self.state
