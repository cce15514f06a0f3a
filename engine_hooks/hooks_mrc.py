"""The hook table of the MambaRadixCache generation (sglang 0.5.10-0.5.15, each tested):
the rows, in hooks_0523's form, for releases whose hybrid models use
`mem_cache.mamba_radix_cache.MambaRadixCache`. Bodies named "mrc.*" are events_mrc.py's; the
others are shared with 0.5.23 (same method, same arguments in these releases).

The write rows are 0.5.23's: these releases run the same two track copies
(`_track_mamba_state_extend`, `track_mamba_states_if_needed`) with the same arguments, and
write_hooks reads their batches as it reads 0.5.17 and 0.5.20's (no CPU track masks or rows on the
batch: the device mask, `req_pool_indices`, sglang's decode interval rule; req_kv). 0.5.10-0.5.13
define the decode copy in the backend module itself (0.5.14-0.5.15 import it there), and
0.5.10-0.5.14 hand it `forward_batch.mamba_track_indices` (0.5.15 the metadata's): the row's
target and arguments are the same. No all-layers copy (Mamba2 decode tracks through
`track_mamba_states_if_needed` here).

The node-level dirty marks ("marks.*", mrc_marks.py) hook the LRU lists' two primitives, the two
deletions, the lock moves and `reset`: the class keeps no node arena, so they also keep its nodes
by id. Without every one of them (`MARKS`) each capture walks and re-reads the whole tree, O(tree).

Not hooked, and what that costs: the T2 origins (which forward wrote a cached state: the track
entries are not kept on the batch).
"""

from __future__ import annotations

from .hooks_0523 import HOOKS as HOOKS_0523
from .hooks_0523 import MODEL_RUNNER, REQ, SCHEDULE_BATCH, SCHEDULER, Hook

MRC = "mem_cache.mamba_radix_cache.MambaRadixCache"
MRC_LRU = "mem_cache.mamba_radix_cache.LRUList"
MAMBA_ALLOCATOR = "mem_cache.allocator.mamba.MambaSlotAllocator"
MAMBA_POOL = "mem_cache.memory_pool.MambaPool"
MAMBA_BACKEND = "layers.attention.hybrid_linear_attn_backend.MambaAttnBackendBase"

_EVICTIONS = "eviction counts in stats; the EvictEvent's nodes, slots and tokens"
_MARKS = "node-level dirty marks (all of MARKS or none): each capture walks and re-reads the whole tree, O(tree)"

MARKS: tuple[Hook, ...] = (
    Hook(f"{MRC_LRU}._add_node_after", "before", "marks.linked", "every", "a node linked into an LRU list: kept by id when new to the tree (every new node enters the full list at once)", _MARKS),
    Hook(f"{MRC_LRU}._remove_node", "before", "marks.unlinking", "every", "dirty marks: a node unlinked from an LRU list and its newer neighbour", _MARKS),
    Hook(f"{MRC}._delete_leaf", "before", "marks.deleting", "every", "dirty marks: a leaf leaves the tree (and the node map), its parent", _MARKS),
    Hook(f"{MRC}._delete_tombstone_leaf", "before", "marks.deleting", "every", "dirty marks: a tombstone leaf leaves the tree (and the node map), its parent", _MARKS),
    Hook(f"{MRC}.inc_lock_ref", "before", "marks.locking", "every", "dirty marks: lock refs from the node to the root", _MARKS),
    Hook(f"{MRC}.dec_lock_ref", "before", "marks.locking", "every", "dirty marks: lock refs from the node to the root", _MARKS),
    Hook(f"{MRC}.reset", "after", "marks.reset", "every", "a new root: the node map walked afresh, every node re-read", _MARKS),
)  # fmt: skip
"""The dirty-mark rows: a release whose cache lacks one of them gets none (walked captures)."""

HOOKS: tuple[Hook, ...] = (
    Hook(f"{SCHEDULER}.__init__", "after", "scheduler.init", "scheduler", "build the inspector: first full capture, bind ports", "everything: no inspector"),
    Hook(f"{SCHEDULER}.process_batch_result", "after", "scheduler.step", "scheduler", "step boundary: capture (the whole tree: MRC has no node arena), fingerprint, publish", "every capture"),
    Hook(f"{SCHEDULER}.on_idle", "after", "scheduler.idle", "scheduler", "no batch to run: catch up if a snapshot request waits or the live stream is due", "snapshots of an idle engine wait for its next step",
         fallbacks=(Hook(f"{SCHEDULER}.self_check_during_idle", "after", "scheduler.idle", "scheduler", "0.5.10: the idle loop's own call (no on_idle)", "snapshots of an idle engine wait for its next step"),)),
    Hook(f"{MRC}._evict_leaf_node", "before", "mrc.leaf_evicting", "every", "a leaf and its slot leave the tree: eviction record", _EVICTIONS),
    Hook(f"{MRC}._tombstone_internal_node", "before", "mrc.tombstoning", "every", "an inner node's slot evicted: tombstone, eviction record", _EVICTIONS + "; tombstones"),
    Hook(f"{MRC}._delete_tombstone_leaf", "before", "mrc.tombstone_deleting", "every", "a tombstone left childless is deleted: its KV tokens", _EVICTIONS),
    Hook(f"{MRC}.insert", "after", "mrc.inserted", "observed", "InsertEvent: slot, node (the mamba LRU's newest), seqlen, donated ping-pong index", "InsertEvents (checks insert-*)"),
    Hook(f"{MRC}.match_prefix", "after", "mrc.matched", "observed", "MatchEvent; remembers the request for lock attribution", "MatchEvents"),
    Hook(f"{MRC}.inc_lock_ref", "after", "mrc.locked", "observed", "LockEvent", "LockEvents"),
    Hook(f"{MRC}.dec_lock_ref", "before", "mrc.unlocking", "observed", "LockEvent", "LockEvents"),
    Hook(f"{MRC}.cache_finished_req", "around", "mrc.finish", "around", "the request a release's insert and unlock belong to; RequestEvent finish", "finish events, the request of a release's unlock"),
    Hook(f"{MRC}.cache_unfinished_req", "around", "cache.checkpoint", "around", "which request a chunk checkpoint's insert and lock moves belong to", "the request of a checkpoint's lock moves"),
    Hook(f"{MRC}.evict", "around", "cache.evict", "around", "one EvictEvent per outermost eviction: nodes, slots, tokens", "EvictEvents"),
    Hook(f"{MAMBA_ALLOCATOR}._do_alloc", "after", "pools.allocated", "observed", "SlotEvent alloc", "SlotEvents",
         fallbacks=(Hook(f"{MAMBA_POOL}.alloc", "after", "pools.allocated", "observed", "0.5.12: the pool allocates its own slots", "SlotEvents"),)),
    Hook(f"{MAMBA_ALLOCATOR}.free", "before", "pools.freeing", "observed", "SlotEvent free", "SlotEvents",
         fallbacks=(Hook(f"{MAMBA_POOL}.free", "before", "pools.freeing", "observed", "0.5.12: the pool frees its own slots", "SlotEvents"),)),
    Hook(f"{MAMBA_ALLOCATOR}.alloc_group_begin", "before", "pools.group_begin", "observed", "an admission group opens: its pre-allocated slots", "admission-group slots show as unowned"),
    Hook(f"{MAMBA_ALLOCATOR}.alloc_group_end", "after", "pools.group_end", "observed", "the admission group closed", "admission-group slots show as unowned"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_extend", "before", "pools.admitting", "observed", "RequestEvent admit (requests without a KV row yet)", "admit events"),
    Hook(f"{SCHEDULE_BATCH}._mamba_radix_cache_v2_req_prepare_for_extend", "after", "pools.prefill_track", "observed", "TrackPlanEvent (prefill; the entry carries the slot id)", "prefill track plans (checks track-*)"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_decode", "after", "mrc.decode_track", "observed", "TrackPlanEvent (decode boundary: sglang's interval rule, the slot of mamba_next_track_idx)", "decode track plans (provenance of states a decode wrote)"),
    Hook(f"{REQ}.reset_for_retract", "after", "pools.retracted", "observed", "RequestEvent retract", "retract events"),
    Hook(f"{MODEL_RUNNER}._maybe_execute_deferred_mamba_cow_and_clear", "around", "cow.copy", "around", "CowEvent: sources, destinations and cleared slots fingerprinted (T3)", "T3 (cow-copy, cow-ran)",
         fallbacks=(Hook(f"{MAMBA_BACKEND}._execute_deferred_mamba_cow_and_clear", "around", "cow.copy", "around", "0.5.13-0.5.14: the mamba attention backend runs the copies", "T3 (cow-copy, cow-ran)"),)),
    Hook(f"{MRC}.insert", "after", "mrc.state_inserted", "state", "T2: a state entered the tree: its slot, node and prefix tokens (the insert's key)", "T2 of cached states"),
    Hook(f"{SCHEDULE_BATCH}._collect_deferred_mamba_cow_and_clear", "before", "state.collecting_copies", "state", "count of the copy-on-write path (demo summary, `Stats.paths`)", "the copy-on-write path count"),
    Hook(f"{SCHEDULE_BATCH}.mix_with_running", "after", "state.mixed", "state", "count of mixed batches (`Stats.paths`)", "the mixed-batch count"),
    *(h for h in HOOKS_0523 if h.kind == "write" and not h.target.endswith("track_mamba_states_all_layers")),
    *MARKS,
)  # fmt: skip
