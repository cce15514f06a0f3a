"""The hook table of the UnifiedRadixCache generation (sglang 0.5.23; fallback rows for 0.5.17-0.5.22): every sglang method
mcinspect hooks, when, which body (by name: events.py, state_log.py, write_hooks.py,
cow_hooks.py, plugin.py bind them) and what it does. The one place these targets live: the
plugin registers from it, `mcinspect hooks` prints it, and the README's table is checked
against it (tests/unit/test_hook_table.py).

A row's `body` is "owner.method" of the hook modules' objects (an `around` row's pair is
method_begin / method_end: events.hook_points). Kinds: `every` runs at every step (dirty marks, counts); `observed` only makes events, so in a
step no capture ends it returns at its first frame; `around` is an observed pair (before /
after); `state` feeds the verifier's StateLog at every step; `write` is observed and off with
MCINSPECT_TRACK_WRITES=off; `scheduler` is the inspector's own step boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

SRT = "sglang.srt."
SCHEDULER = "managers.scheduler.Scheduler"
TREE_CORE = "mem_cache.unified_cache.unified_tree_core.UnifiedTreeCore"
FULL_COMPONENT = "mem_cache.unified_cache.components.full.FullComponent"
MAMBA_COMPONENT = "mem_cache.unified_cache.components.mamba.MambaComponent"
# 0.5.19: the same classes, in the modules the components package had before its rename
FULL_COMPONENT_0519 = "mem_cache.unified_cache.components.full_component.FullComponent"
MAMBA_COMPONENT_0519 = "mem_cache.unified_cache.components.mamba_component.MambaComponent"
CACHE = "mem_cache.unified_radix_cache.UnifiedRadixCache"
MAMBA_ALLOCATOR = "mem_cache.allocator.mamba.MambaSlotAllocator"
SCHEDULE_BATCH = "managers.schedule_batch.ScheduleBatch"
REQ = "managers.schedule_batch.Req"
BACKEND_MODULE = "layers.attention.hybrid_linear_attn_backend"
BACKEND = BACKEND_MODULE + ".MambaAttnBackendBase"
MODEL_RUNNER = "model_executor.model_runner.ModelRunner"


@dataclass(frozen=True)
class Hook:
    """One row: `target` relative to `sglang.srt.`; `when` before / after / around; `body` the
    name the hook modules bind; `kind` as above; `lost` what a release without it loses."""

    target: str
    when: str
    body: str
    kind: str
    what: str
    lost: str
    fallbacks: tuple[Hook, ...] = ()
    """Rows that stand in for this one in a release without its target (tried in order)."""

    @property
    def dotted(self) -> str:
        return SRT + self.target


_TREE_LOST = "node-level dirty marks: each step re-reads the whole tree (O(tree) per capture)"

HOOKS: tuple[Hook, ...] = (
    Hook(f"{SCHEDULER}.__init__", "after", "scheduler.init", "scheduler", "build the inspector: first full capture, bind ports", "everything: no inspector"),
    Hook(f"{SCHEDULER}.process_batch_result", "after", "scheduler.step", "scheduler", "step boundary: capture what changed, fingerprint, publish (or, with nobody subscribed or the live budget spent, count the step)", "every capture"),
    Hook(f"{SCHEDULER}.on_idle", "after", "scheduler.idle", "scheduler", "no batch to run: catch up if a snapshot request waits or the live stream is due; the verifier's idle turns", "snapshots of an idle engine wait for its next step"),
    Hook(f"{TREE_CORE}._unregister_node", "after", "tree.node_gone", "every", "node removed: dirty, forget tombstone, eviction record", _TREE_LOST),
    Hook(f"{TREE_CORE}._update_evictable_leaf_sets", "after", "tree.node_changed", "every", "node changed: dirty (splits, lock refs, cascades end here)", _TREE_LOST),
    Hook(f"{TREE_CORE}._touch_node", "after", "tree.node_changed", "every", "the insert walk stamped last_access: dirty", _TREE_LOST),
    Hook(f"{TREE_CORE}._match_post_processor", "after", "tree.matched", "every", "a match stamped last_access along a path: dirty path", _TREE_LOST),
    Hook(f"{TREE_CORE}._evict_component_and_detach_lru", "after", "tree.component_evicted", "every", "a component value freed: dirty, tombstone, eviction record", _TREE_LOST + "; tombstones"),
    Hook(f"{TREE_CORE}.set_component_device_value", "after", "tree.value_set", "every", "a state given to an existing node (also HiCache load-back): dirty", _TREE_LOST),
    Hook(f"{FULL_COMPONENT}.acquire_component_lock", "after", "tree.path_lock", "every", "FULL lock refs along a path: dirty path", _TREE_LOST,
         fallbacks=(Hook(f"{FULL_COMPONENT_0519}.acquire_component_lock", "after", "tree.path_lock", "every", "0.5.19: the same, in the module before the rename", _TREE_LOST),)),
    Hook(f"{FULL_COMPONENT}.release_component_lock", "after", "tree.path_lock", "every", "FULL lock refs along a path: dirty path", _TREE_LOST,
         fallbacks=(Hook(f"{FULL_COMPONENT_0519}.release_component_lock", "after", "tree.path_lock", "every", "0.5.19: the same, in the module before the rename", _TREE_LOST),)),
    Hook(f"{CACHE}._apply_eviction_result", "before", "cache.eviction_result", "every", "eviction counts (stats); the EvictEvent's slots and tokens", "eviction counts in stats",
         fallbacks=(Hook(f"{CACHE}._free_values", "before", "cache.values_freed", "every", "0.5.22: the same, from the eviction result's device frees", "eviction counts in stats"),)),
    Hook(f"{MAMBA_COMPONENT}.cleanup_after_caching_req", "before", "cache.inserting", "observed", "InsertEvent: slot, node, seqlen, donated ping-pong index", "InsertEvents (checks insert-*)",
         fallbacks=(Hook(f"{MAMBA_COMPONENT_0519}.cleanup_after_caching_req", "before", "cache.inserting", "observed", "0.5.19: the same, in the module before the rename", "InsertEvents (checks insert-*)"),)),
    Hook(f"{CACHE}.match_prefix", "after", "cache.matched", "observed", "MatchEvent; remembers the request for lock attribution", "MatchEvents"),
    Hook(f"{CACHE}.lock", "after", "cache.locked", "observed", "LockEvent", "LockEvents",
         fallbacks=(Hook(f"{CACHE}.inc_lock_ref", "after", "cache.locked", "observed", "0.5.21: the same, at the method every tree lock goes through (temporary ones too)", "LockEvents"),)),
    Hook(f"{CACHE}.unlock", "before", "cache.unlocking", "observed", "LockEvent", "LockEvents",
         fallbacks=(Hook(f"{CACHE}.dec_lock_ref", "before", "cache.lock_ref_dropping", "observed", "0.5.21: the same, by node id (the request whose last_node it is)", "LockEvents"),)),
    Hook(f"{CACHE}.claim_kv_row", "before", "cache.releasing_row", "observed", "which request release_kv_cache's unlock belongs to", "the request of a release's unlock",
         fallbacks=(Hook(f"{CACHE}.cache_finished_req", "before", "cache.releasing_row", "observed", "0.5.20: the same, where release_kv_cache hands the request to the tree (insert, row free and unlock in one method)", "the request of a release's unlock"),)),
    Hook(f"{CACHE}.on_release", "after", "cache.released", "observed", "RequestEvent finish", "finish events",
         fallbacks=(Hook(f"{CACHE}.cache_finished_req", "after", "cache.finished_cached", "observed", "0.5.20: the same, after its unlock (none for a streaming session that kept the row)", "finish events"),)),
    Hook(f"{CACHE}.checkpoint_into_tree", "around", "cache.checkpoint", "around", "which request a chunk checkpoint's lock moves belong to", "the request of a checkpoint's lock moves",
         fallbacks=(Hook(f"{CACHE}.cache_unfinished_req", "around", "cache.checkpoint", "around", "0.5.21: the same for its chunk checkpoint (insert, rematch, lock move; a finished request's insert_req moves no lock)", "the request of a checkpoint's lock moves"),)),
    Hook(f"{CACHE}.evict", "around", "cache.evict", "around", "one EvictEvent per outermost eviction: nodes, slots, tokens", "EvictEvents"),
    Hook(f"{CACHE}.evict_for_alloc", "around", "cache.evict", "around", "one EvictEvent per outermost eviction: nodes, slots, tokens", "EvictEvents of allocation-time evictions (none lost on 0.5.17-0.5.18: their allocation evicts through `evict`)"),
    Hook(f"{MAMBA_ALLOCATOR}._do_alloc", "after", "pools.allocated", "observed", "SlotEvent alloc", "SlotEvents"),
    Hook(f"{MAMBA_ALLOCATOR}.free", "before", "pools.freeing", "observed", "SlotEvent free", "SlotEvents"),
    Hook(f"{MAMBA_ALLOCATOR}.alloc_group_begin", "before", "pools.group_begin", "observed", "an admission group opens: its pre-allocated slots", "admission-group slots show as unowned"),
    Hook(f"{MAMBA_ALLOCATOR}.alloc_group_end", "after", "pools.group_end", "observed", "the admission group closed", "admission-group slots show as unowned"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_extend", "before", "pools.admitting", "observed", "RequestEvent admit (requests without a KV row yet)", "admit events"),
    Hook(f"{SCHEDULE_BATCH}._mamba_radix_cache_v2_req_prepare_for_extend", "after", "pools.prefill_track", "observed", "TrackPlanEvent (prefill)", "prefill track plans (checks track-*)"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_decode", "after", "pools.decode_track", "observed", "TrackPlanEvent (decode boundary)", "decode track plans"),
    Hook(f"{REQ}.reset_for_retract", "after", "pools.retracted", "observed", "RequestEvent retract", "retract events"),
    Hook(f"{MODEL_RUNNER}._maybe_execute_deferred_mamba_cow_and_clear", "around", "cow.copy", "around", "CowEvent: sources, destinations and cleared slots fingerprinted (T3)", "T3 (cow-copy, cow-ran)"),
    Hook(f"{MAMBA_COMPONENT}.cleanup_after_caching_req", "before", "state.inserting", "state", "T2: a state entered the tree: its slot, node and prefix tokens (the insert's key)", "T2 of cached states",
         fallbacks=(Hook(f"{MAMBA_COMPONENT_0519}.cleanup_after_caching_req", "before", "state.inserting", "state", "0.5.19: the same, in the module before the rename", "T2 of cached states"),)),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_extend", "after", "state.extend_planned", "state", "T2: the forward that will write each tracked state (request, batch size, position, extend lengths)", "T2 origins (prefill)"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_decode", "after", "state.decode_planned", "state", "T2: the forward that will write each tracked state (decode)", "T2 origins (decode)"),
    Hook(f"{SCHEDULE_BATCH}._collect_deferred_mamba_cow_and_clear", "before", "state.collecting_copies", "state", "count of the copy-on-write path (demo summary, `Stats.paths`)", "the copy-on-write path count"),
    Hook(f"{SCHEDULE_BATCH}.mix_with_running", "after", "state.mixed", "state", "count of mixed batches (`Stats.paths`)", "the mixed-batch count"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_extend", "after", "write.extend_prepared", "write", "which request holds each req_to_token row, the position its track write is for", "track writes (checks write-*)"),
    Hook(f"{SCHEDULE_BATCH}.prepare_for_decode", "after", "write.decode_prepared", "write", "the same for a decode batch", "track writes of decode"),
    Hook(f"{SCHEDULE_BATCH}.mix_with_running", "after", "write.mixed", "write", "the same for a mixed batch", "track writes of mixed batches"),
    Hook(f"{BACKEND}._track_mamba_state_extend", "before", "write.extend_tracked", "write", "TrackWriteEvent of an extend / mixed forward: the destination slots its state-tracking copy used (`track_ssm_*_dst`), with the batch's planned ones", "track writes of extend forwards"),
    Hook(f"{BACKEND_MODULE}.track_mamba_states_if_needed", "before", "write.decode_copied", "write", "TrackWriteEvent of decode rows: the destinations and mask the copy was handed", "track writes of decode forwards"),
    Hook(f"{BACKEND_MODULE}.track_mamba_states_all_layers", "before", "write.decode_copied", "write", "the same, the all-layers copy (Mamba2)", "track writes of Mamba2 decode forwards"),
)  # fmt: skip


def markdown(hooks: tuple[Hook, ...] = HOOKS) -> str:
    """The table as the README shows it (generated: `mcinspect hooks --markdown`)."""
    lines = ["| method | hook | kind | what mcinspect does |", "|---|---|---|---|"]
    for h in hooks:
        lines.append(f"| `{h.target}` | {h.when} | {h.kind} | {h.what} |")
        lines += [f"| `{f.target}` (where the row above is missing) | {f.when} | {f.kind} | {f.what} |" for f in h.fallbacks]
    return "\n".join(lines) + "\n"
