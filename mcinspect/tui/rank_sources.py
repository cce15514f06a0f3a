"""The ranks of one engine as the inspector sees them: one DataSource per rank, in rank order.

A recording's ranks are its rank files (fixed). A live engine's are discovered on a thread
(mcinspect.ranks: rank 0 says how many there are, the others are looked for on every host
given) and followed by a SessionSource each; until then one `PendingSource` stands for them,
"connecting", with the reason the last try failed. The UI never waits on any of it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..schema import CacheState, Delta, EngineInfo, NodeId, VerifyStats
from ..verify_command import Judged, VerifyError  # imports no client: replays stay free of zmq
from .source import DataSource, FrameGone, FrameMeta, NodeChanges, SourceHealth

if TYPE_CHECKING:
    from ..target import Target

DISCOVERY_TIMEOUT_S = 2.0
"""How long one discovery try waits for each answer."""
RETRY_S = 2.0


class PendingSource:
    """Stands for the ranks of an engine not found yet: no frames, "connecting", the last error."""

    live = True

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_error = ""

    def start(self, notify: Callable[[], None]) -> None:
        pass

    def close(self) -> None:
        pass

    def engine(self) -> EngineInfo | None:
        return None

    def health(self) -> SourceHealth:
        return SourceHealth(status="connecting", last_error=self.last_error)

    def frames(self) -> Sequence[FrameMeta]:
        return []

    def state_at(self, index: int) -> CacheState:
        raise FrameGone("not connected yet")

    def node_changes(self, index: int) -> NodeChanges | None:
        return None

    def delta_at(self, index: int) -> Delta | None:
        return None

    def verify(self, nodes: list[NodeId]) -> list[Judged]:
        raise VerifyError("not connected to the engine yet")

    def verifier(self) -> VerifyStats | None:
        return None


class RankSources:
    """One DataSource per rank of an engine; `sources()` may grow once (a live engine found)."""

    def __init__(self, sources: Sequence[DataSource], *, discover: Callable[[], Sequence[DataSource]] | None = None) -> None:
        """`sources`: the ranks' sources, or (with `discover`) the placeholder shown until
        `discover()`, run on a thread and retried until it returns, hands out the real ones."""
        self._sources = list(sources)
        self._discover = discover
        self._closed = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def of_engine(cls, targets: Sequence[Target], token: str, every_step: bool) -> RankSources:
        """Every rank of the live engine whose rank 0 listens at `targets[0]` (more hosts after it)."""
        mode = "every step" if every_step else "sampled"  # the live stream: within the engine's time budget
        first = targets[0]
        pending = PendingSource(f"{first.host}:{first.port} ({mode})")

        def discover() -> list[DataSource]:
            from ..ranks import discover as discover_ranks
            from ..session import Session
            from .session_source import SessionSource

            found = []
            for rank in discover_ranks(targets, token, DISCOVERY_TIMEOUT_S):
                target = rank.target
                found.append(
                    SessionSource(
                        lambda on_frame, target=target: Session(target, token=token, every_step=every_step, on_frame=on_frame),
                        name=f"{target.host}:{target.port} ({mode})",
                        target=target,
                        token=token,
                    )
                )
            return found

        return cls([pending], discover=discover)

    @property
    def live(self) -> bool:
        return self._sources[0].live

    def sources(self) -> list[DataSource]:
        with self._lock:
            return list(self._sources)

    def start(self, notify: Callable[[], None]) -> None:
        if self._discover is None:
            for source in self._sources:
                source.start(notify)
            return
        threading.Thread(target=self._discover_loop, args=(notify,), name="mcinspect-discover-ranks", daemon=True).start()

    def _discover_loop(self, notify: Callable[[], None]) -> None:
        from ..errors import McinspectError

        assert self._discover is not None
        pending = self._sources[0]
        while not self._closed.is_set():
            try:
                found = list(self._discover())
            except McinspectError as exc:
                if isinstance(pending, PendingSource):
                    pending.last_error = str(exc)
                notify()
                self._closed.wait(RETRY_S)
                continue
            with self._lock:
                if self._closed.is_set():
                    return
                self._sources = found
            for source in found:
                source.start(notify)
            notify()
            return

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for source in self._sources:
                source.close()
