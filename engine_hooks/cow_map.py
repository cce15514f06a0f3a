"""An int-keyed map whose state a snapshot can take in O(shards), for the scheduler thread's
baseline (nodes, slots, contents) and the request thread's snapshots of it.

Copying a 100k-entry dict is one C call of several ms holding the GIL (the scheduler thread can
run no Python meanwhile), and doing it under the inspector's lock made the scheduler wait for
the lock too. Here the entries live in shards of SHARD_SIZE consecutive keys; `freeze()` hands
out the current shards as they are (`Frozen`) and the next change of each shard copies it
first (copy on write: a step copies only the shards it changes, SHARD_SIZE entries each, a
fraction of a millisecond). Nobody changes a frozen shard, so the request thread reads it
without the lock and builds its dict a shard at a time with rests between shards
(`Frozen.to_dict`).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from typing import Generic, TypeVar

K = TypeVar("K", bound=int)
V = TypeVar("V")

SHARD_BITS = 10
SHARD_SIZE = 1 << SHARD_BITS
"""Keys a shard holds: copying one is ~0.05 ms; a 100k-key map has ~100 (node and slot ids are
dense, so shards are full)."""
REST_RATIO = 3
"""`Frozen.to_dict` rests this many times as long as it copied (as rested_encode.py does)."""


class Frozen(Generic[K, V]):
    """The entries of a CowMap as of its `freeze()`; never changes. Any thread may read it."""

    __slots__ = ("_shards", "_len")

    def __init__(self, shards: dict[int, dict[K, V]], length: int) -> None:
        self._shards, self._len = shards, length
        """Shard index -> its entries, in key order."""

    def __len__(self) -> int:
        return self._len

    def get(self, key: K) -> V | None:
        shard = self._shards.get(key >> SHARD_BITS)
        return None if shard is None else shard.get(key)

    def shards(self) -> list[dict[K, V]]:
        """The shards in key order (to go through the keys a shard at a time; never change them)."""
        return list(self._shards.values())

    def to_dict(self, rest: Callable[[float], None] = time.sleep) -> dict[K, V]:
        """A new dict of the entries, built a shard at a time with `rest(seconds)` after each
        (REST_RATIO times the shard's own copy): no GIL hold longer than one shard's copy."""
        out: dict[K, V] = {}
        for shard in self._shards.values():
            began = time.perf_counter()
            out.update(shard)
            rest((time.perf_counter() - began) * REST_RATIO)
        return out


class CowMap(Generic[K, V]):
    """A dict[int, V] in shards of SHARD_SIZE consecutive keys, copied on write after `freeze()`.
    One thread changes it (the scheduler's); others only read what `freeze()` handed them."""

    __slots__ = ("_shards", "_owned", "_len")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._shards: dict[int, dict[K, V]] = {}
        self._owned: set[int] = set()
        """Shards copied since the last freeze (or new): safe to change in place."""
        self._len = 0
        shards = self._shards
        for key, value in items.items() if isinstance(items, Mapping) else items:
            shard = shards.get(key >> SHARD_BITS)
            if shard is None:
                shard = shards[key >> SHARD_BITS] = {}
            shard[key] = value
        self._owned.update(shards)
        self._len = sum(map(len, shards.values()))

    def freeze(self) -> Frozen[K, V]:
        """The entries now, in O(shards); the map's next change of each shard copies it first."""
        self._owned.clear()
        return Frozen({i: self._shards[i] for i in sorted(self._shards)}, self._len)

    def _writable(self, key: K) -> dict[K, V]:
        index = key >> SHARD_BITS
        if index in self._owned:
            return self._shards[index]
        shard = self._shards.get(index)
        shard = self._shards[index] = {} if shard is None else dict(shard)
        self._owned.add(index)
        return shard

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: object) -> bool:
        shard = self._shards.get(key >> SHARD_BITS) if isinstance(key, int) else None
        return shard is not None and key in shard

    def __iter__(self) -> Iterator[K]:
        for index in sorted(self._shards):
            yield from self._shards[index]

    def __getitem__(self, key: K) -> V:
        shard = self._shards.get(key >> SHARD_BITS)
        if shard is None:
            raise KeyError(key)
        return shard[key]

    def get(self, key: K, default: V | None = None) -> V | None:
        shard = self._shards.get(key >> SHARD_BITS)
        return default if shard is None else shard.get(key, default)

    def __setitem__(self, key: K, value: V) -> None:
        shard = self._writable(key)
        if key not in shard:
            self._len += 1
        shard[key] = value

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        del self._writable(key)[key]
        self._len -= 1

    def pop(self, key: K) -> V:
        value = self[key]
        del self[key]
        return value

    def update(self, items: Mapping[K, V]) -> None:
        for key, value in items.items():
            self[key] = value

    def keys(self) -> list[K]:
        """Every key, in order (a list built in C, shard by shard)."""
        return list(itertools.chain.from_iterable(self._shards[i] for i in sorted(self._shards)))

    def pop_keys_in(self, keys: Set[int]) -> list[K]:
        """Delete the keys of `keys` this map holds; returns them. Many keys go a shard at a time
        in C (set operations over the smaller side, the deletes one `map`): deleted one at a
        time, a catch-up's 50k were 50 ms of the scheduler thread in one step."""
        if len(keys) <= SHARD_SIZE:
            hits: list[K] = [key for key in keys if key in self]  # type: ignore[misc]
            for key in hits:
                del self[key]
            return hits
        out: list[K] = []
        for index, shard in list(self._shards.items()):
            hit = shard.keys() & keys
            if not hit:
                continue
            if len(hit) == len(shard):  # a frozen copy keeps its own reference
                del self._shards[index]
                self._owned.discard(index)
            else:
                deque(map(self._writable(next(iter(hit))).__delitem__, hit), maxlen=0)
            self._len -= len(hit)
            out += hit
        return out

    def values(self) -> Iterator[V]:
        for index in sorted(self._shards):
            yield from self._shards[index].values()

    def items(self) -> Iterator[tuple[K, V]]:
        for index in sorted(self._shards):
            yield from self._shards[index].items()

    def to_dict(self) -> dict[K, V]:
        """A plain dict of the entries, at once (no freeze: the shards stay writable)."""
        out: dict[K, V] = {}
        for index in sorted(self._shards):
            out.update(self._shards[index])
        return out
