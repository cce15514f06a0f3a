"""The state of the last published capture as the request thread takes it: frozen shards
(cow_map.py), taken under the inspector's lock in O(shards), and turned into a CacheState outside
it a shard at a time, so that no single call holds the GIL for a tree's worth of copying."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mcinspect.schema import CacheState, KvState, NodeId, NodeRecord, RequestRecord, Rid, SlotClaim, SlotContent, SlotId, Step

from .cow_map import Frozen


@dataclass(frozen=True)
class PublishedState:
    step: Step
    nodes: Frozen[NodeId, NodeRecord]
    slots: Frozen[SlotId, tuple[SlotClaim, ...]]
    requests: dict[Rid, RequestRecord]
    """The capture's own dict, which it replaces (never changes) at each step (a few hundred)."""
    kv: KvState

    def to_cache_state(self, contents: dict[SlotId, SlotContent] | None = None, rest: Callable[[float], None] = time.sleep) -> CacheState:
        """The CacheState (new dicts; the records are shared), built with `rest`s between shards."""
        return CacheState(
            step=self.step,
            nodes=self.nodes.to_dict(rest),
            slots=self.slots.to_dict(rest),  # type: ignore[arg-type]  # tuples encode as the schema's lists
            requests=dict(self.requests),
            kv=self.kv,
            contents=contents if contents is not None else {},
        )
