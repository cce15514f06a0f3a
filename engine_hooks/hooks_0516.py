"""The hook table of sglang 0.5.16's UnifiedRadixCache (the unified-radix-0516 generation):
rows in hooks_0523's form. The cache's own rows are 0.5.16's (bodies "radix0516.*":
events_0516.py); the pool, batch, copy-on-write, T2-origin and write rows are 0.5.23's,
whose targets 0.5.16 has with the same arguments.

Not hooked, and what that costs: node-level dirty marks (0.5.16 has no node arena and no
method that names a changed node: every capture re-reads the whole tree, O(tree), as on the
MambaRadixCache releases); `track_mamba_states_all_layers` (not in 0.5.16: Mamba2 decode track
writes go unseen, the `write-*` checks of decode rows for those models).
"""

from __future__ import annotations

from .hooks_0523 import CACHE, Hook
from .hooks_0523 import HOOKS as HOOKS_0523

MAMBA_COMPONENT = "mem_cache.unified_cache_components.mamba_component.MambaComponent"

_EVICTIONS = "eviction counts in stats; the EvictEvent's nodes, slots and tokens"
_SHARED = {
    "pools.allocated", "pools.freeing", "pools.group_begin", "pools.group_end", "pools.admitting", "pools.prefill_track",
    "pools.decode_track", "pools.retracted", "cow.copy", "state.extend_planned", "state.decode_planned",
    "state.collecting_copies", "state.mixed", "write.extend_prepared", "write.decode_prepared", "write.mixed",
    "write.extend_tracked", "write.decode_copied",
}  # fmt: skip
"""Bodies of 0.5.23's rows that read 0.5.16 as they read 0.5.23 (requests through req_kv)."""

HOOKS: tuple[Hook, ...] = (
    *(h for h in HOOKS_0523 if h.kind == "scheduler"),
    Hook(f"{CACHE}._evict_component_and_detach_lru", "before", "radix0516.component_evicting", "every", "a component value leaves a node: eviction record (slot, KV tokens), tombstone", _EVICTIONS + "; tombstones"),
    Hook(f"{CACHE}._remove_leaf_from_parent", "before", "radix0516.leaf_removing", "every", "an evicted leaf leaves the tree: eviction record, forget tombstone", _EVICTIONS),
    Hook(f"{MAMBA_COMPONENT}.commit_insert_component_data", "after", "radix0516.committed", "every", "the node an insert gave the state (0.5.16's InsertResult names none)", "InsertEvents and T2 of cached states"),
    Hook(f"{MAMBA_COMPONENT}.cleanup_after_caching_req", "before", "radix0516.inserting", "observed", "InsertEvent: slot, node, seqlen, donated ping-pong index", "InsertEvents (checks insert-*)"),
    Hook(f"{CACHE}.match_prefix", "after", "cache.matched", "observed", "MatchEvent; remembers the request for lock attribution", "MatchEvents"),
    Hook(f"{CACHE}.inc_lock_ref", "after", "radix0516.locked", "observed", "LockEvent (by node, as MambaRadixCache's)", "LockEvents"),
    Hook(f"{CACHE}.dec_lock_ref", "before", "radix0516.unlocking", "observed", "LockEvent", "LockEvents"),
    Hook(f"{CACHE}.cache_finished_req", "around", "radix0516.finish", "around", "the request a release's insert and unlock belong to; RequestEvent finish", "finish events, the request of a release's unlock"),
    Hook(f"{CACHE}.cache_unfinished_req", "around", "cache.checkpoint", "around", "which request a chunk checkpoint's insert, rematch and lock moves belong to", "the request of a checkpoint's lock moves"),
    Hook(f"{CACHE}.evict", "around", "cache.evict", "around", "one EvictEvent per outermost eviction: nodes, slots, tokens", "EvictEvents"),
    Hook(f"{MAMBA_COMPONENT}.cleanup_after_caching_req", "before", "radix0516.state_inserting", "state", "T2: a state entered the tree: its slot, node and prefix tokens (the insert's key)", "T2 of cached states"),
    *(h for h in HOOKS_0523 if h.body in _SHARED),
)  # fmt: skip

REQUIRED: tuple[str, ...] = tuple(
    h.target
    for h in HOOKS
    if h.kind == "scheduler"
    or h.body in ("radix0516.committed", "radix0516.inserting", "radix0516.locked", "cache.checkpoint", "pools.allocated")
)
"""What the generation cannot do without: the step boundary, where states enter the tree, lock
moves, chunk checkpoints, slot allocation."""
