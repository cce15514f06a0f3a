"""How much of the engine the request socket may take: a share of time, and a rate per client.

The request thread shares the GIL with the scheduler: while it decodes, copies or encodes, the
scheduler waits. Two bounds keep that small whoever asks and however often:

- `TimeShare`: the thread's busy time (its CPU time, what holds the GIL; waiting for a capture
  holds nothing) stays within `share` of the wall time. After a request that kept it busy t
  seconds it reads the next one only t / share later (at most `max_wait_s`, so a huge snapshot
  does not starve every client's heartbeat), and never sooner than `min_gap_s`: each wake-up
  takes the GIL from the scheduler, which costs it more than the request's own CPU time. Requests wait meanwhile in ZMQ's
  bounded queues, which ROUTER serves round robin: a flooding client delays its own requests,
  and others by at most one of its requests per turn.
- `ClientRates`: a token bucket per client (ZMQ routing id); a request past it is refused at
  once with a prepared reply, before any decoding.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_SHARE = 0.02
"""Of the wall time, what the request thread may be busy (on the demo a snapshot reply costs ~1 ms)."""


class TimeShare:
    """Busy time of one thread held to a share of the wall time (wall times from perf_counter)."""

    def __init__(self, share: float = DEFAULT_SHARE, max_wait_s: float = 1.0, min_gap_s: float = 0.005) -> None:
        self.share = share
        self.max_wait_s = max_wait_s
        self.min_gap_s = min_gap_s
        self._ready_at = 0.0

    def wait_s(self, now: float) -> float:
        """How long to wait before serving the next request."""
        return max(0.0, self._ready_at - now)

    def spent(self, busy: float, now: float) -> None:
        """A request kept the thread busy `busy` seconds, ending at `now`."""
        self._ready_at = now + max(self.min_gap_s, min(busy * (1 / self.share - 1), self.max_wait_s))


class ClientRates:
    """A token bucket per client: `rate` requests a second, bursts of `burst`."""

    def __init__(self, rate: float = 20.0, burst: float = 40.0, clients: int = 1024) -> None:
        self.rate, self.burst, self.clients = rate, burst, clients
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()
        """client -> (tokens, when counted); the least recently seen first (bounded)."""

    def admit(self, client: bytes, now: float) -> bool:
        """Take a token for one request of `client`; False when it has none left."""
        tokens, then = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        admitted = tokens >= 1.0
        self._buckets[client] = (tokens - 1.0 if admitted else tokens, now)
        if len(self._buckets) > self.clients:
            self._buckets.popitem(last=False)  # a client unseen the longest starts afresh
        return admitted
