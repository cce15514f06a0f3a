"""A request's KV runs as a value that grows in O(1) a step, and the engine's msgpack encoder,
which writes one as the schema's list of runs.

At page size 1 a decoding request's row gains a run per token (each decode step takes one token
per row out of one allocation). Held as a tuple, its record's `kv_runs` were copied whole at
every step: O(the row) a request a step on the scheduler thread (18 ms a step at 256 requests
1,000 tokens in: tests/bench/bench_decode_deltas.py), and as many new tuples for the cyclic GC.
A `GrowingRuns` shares one append-only list with the values before and after it: each is the
first `count` runs of that list and its own last run, held apart (decoding lengthens the last
run, which the list's copy would then have to change under the older values).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from mcinspect.run_edits import Run


class GrowingRuns:
    """Immutable (start, length) runs: `closed[:count]`, then `last` (None: no runs at all)."""

    __slots__ = ("_closed", "_count", "_last")

    def __init__(self, closed: list[Run], count: int, last: Run | None) -> None:
        self._closed, self._count, self._last = closed, count, last

    @classmethod
    def empty(cls) -> GrowingRuns:
        return cls([], 0, None)

    def extended(self, added: Sequence[Run]) -> GrowingRuns:
        """These runs followed by `added`, its first run joined to the last when it continues it
        (schema.join_runs: what a client does with a RequestGrowth's runs)."""
        if not added:
            return self
        closed, count, last = self._closed, self._count, self._last
        if len(closed) != count:  # a later value took this list on: its own copy (O(runs), once)
            closed = closed[:count]
        rest = added
        if last is not None and last[0] + last[1] == added[0][0]:
            last, rest = (last[0], last[1] + added[0][1]), added[1:]
        for run in rest:
            if last is not None:
                closed.append(last)
                count += 1
            last = run
        return GrowingRuns(closed, count, last)

    def to_list(self) -> list[Run]:
        runs = self._closed[: self._count]
        if self._last is not None:
            runs.append(self._last)
        return runs

    def __len__(self) -> int:
        return self._count + (self._last is not None)

    def __iter__(self) -> Iterator[Run]:
        return iter(self.to_list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GrowingRuns):
            return self is other or self.to_list() == other.to_list()
        if isinstance(other, (list, tuple)):
            return self.to_list() == [tuple(run) for run in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists: unhashable as they are

    def __repr__(self) -> str:
        return f"GrowingRuns({self.to_list()!r})"


def _enc_hook(value: Any) -> Any:
    if isinstance(value, GrowingRuns):
        return value.to_list()
    raise NotImplementedError(f"mcinspect does not encode {type(value).__name__}")


def encoder() -> msgspec.msgpack.Encoder:
    """A msgpack encoder for the engine's messages (records' GrowingRuns as lists); one per
    thread, as msgspec's encoders are not shared."""
    return msgspec.msgpack.Encoder(enc_hook=_enc_hook)
