"""The hook table of sglang 0.5.16's UnifiedRadixCache (the unified-radix-0516 generation):
rows in hooks_0523's form. The cache's own rows are 0.5.16's (bodies "radix0516.*":
events_0516.py); the pool, batch, copy-on-write, T2-origin and write rows are 0.5.23's,
whose targets 0.5.16 has with the same arguments.

The node-level dirty marks (`MARKS`) hook the methods 0.5.17 moved into its tree core, with
0.5.23's "tree.*" bodies, and the cache's node creations and deletions ("marks0516.*",
marks_0516.py): 0.5.16 keeps no node arena, so they also keep its nodes by id. Without every one
of them each capture walks and re-reads the whole tree, O(tree).

Not hooked, and what that costs: `track_mamba_states_all_layers` (not in 0.5.16: Mamba2 decode
track writes go unseen, the `write-*` checks of decode rows for those models).
"""

from __future__ import annotations

from .hooks_0523 import CACHE, Hook
from .hooks_0523 import HOOKS as HOOKS_0523

MAMBA_COMPONENT = "mem_cache.unified_cache_components.mamba_component.MambaComponent"
FULL_COMPONENT = "mem_cache.unified_cache_components.full_component.FullComponent"

_EVICTIONS = "eviction counts in stats; the EvictEvent's nodes, slots and tokens"
_SHARED = {
    "pools.allocated", "pools.freeing", "pools.group_begin", "pools.group_end", "pools.admitting", "pools.prefill_track",
    "pools.decode_track", "pools.retracted", "cow.copy", "state.extend_planned", "state.decode_planned",
    "state.collecting_copies", "state.mixed", "write.extend_prepared", "write.decode_prepared", "write.mixed",
    "write.extend_tracked", "write.decode_copied",
}  # fmt: skip
"""Bodies of 0.5.23's rows that read 0.5.16 as they read 0.5.23 (requests through req_kv)."""

_MARKS = "node-level dirty marks (all of MARKS or none): each capture walks and re-reads the whole tree, O(tree)"

MARKS: tuple[Hook, ...] = (
    Hook(f"{CACHE}._add_new_node", "after", "marks0516.created", "every", "an insert's new leaf: kept by id (0.5.16 keeps no node arena)", _MARKS),
    Hook(f"{CACHE}._split_node", "after", "marks0516.created", "every", "a split's new parent: kept by id", _MARKS),
    Hook(f"{CACHE}._remove_leaf_from_parent", "before", "marks0516.leaving", "every", "dirty marks: a leaf leaves the tree (and the node map)", _MARKS),
    Hook(f"{CACHE}._update_evictable_leaf_sets", "after", "tree.node_changed", "every", "dirty marks: a node changed (new leaves and their parents, splits, lock moves, cascades end here)", _MARKS),
    Hook(f"{CACHE}._touch_node", "after", "tree.node_changed", "every", "dirty marks: the insert walk stamped last access (and hit count)", _MARKS),
    Hook(f"{CACHE}._match_post_processor", "after", "marks0516.matched", "every", "dirty marks: a match stamped last access along a path", _MARKS),
    Hook(f"{FULL_COMPONENT}.acquire_component_lock", "after", "tree.path_lock", "every", "dirty marks: FULL lock refs along a path", _MARKS),
    Hook(f"{FULL_COMPONENT}.release_component_lock", "after", "tree.path_lock", "every", "dirty marks: FULL lock refs along a path", _MARKS),
    Hook(f"{CACHE}.reset", "after", "marks.reset", "every", "a new root: the node map walked afresh, every node re-read", _MARKS),
)  # fmt: skip
"""The dirty-mark rows: a release whose cache lacks one of them gets none (walked captures)."""

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
    *MARKS,
)  # fmt: skip

REQUIRED: tuple[str, ...] = tuple(
    h.target
    for h in HOOKS
    if h.kind == "scheduler"
    or h.body in ("radix0516.committed", "radix0516.inserting", "radix0516.locked", "cache.checkpoint", "pools.allocated")
)
"""What the generation cannot do without: the step boundary, where states enter the tree, lock
moves, chunk checkpoints, slot allocation."""
