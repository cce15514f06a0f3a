"""Every check mcinspect runs: its name, what it catches, the upstream bug classes it targets,
what data it needs, and what it cannot see with the data the schema carries.

| check | invariant | needs | targets |
|---|---|---|---|
| slot-partition | 1 | metadata | leaked / doubly owned slots, #24221 |
| request-slots | 2 | metadata (+ EngineInfo) | donated slot -1, broken ping-pong buffers |
| provenance | 3 | events | #30862, #24613/#22876, #31850, #29349 |
| state-depth | 4 | events | #38815/#39209, #34808/#35412/#39115, #35694, #29792/#24590 |
| ping-pong-safety | 5 | events | #24954, #24221 |
| locks | 6 | metadata (Python tree core) | #12007, lock leaks and double releases |
| cow-source | 7 | events | #35821 |
| tree-shape | 8 | metadata | #12007, #35821 |
| kv-pages | 9 | metadata | KV use-after-free, row/tree divergence |
| mamba-lru | 10 | metadata (MambaRadixCache) | #12007 |
| content-immutable | T1 | fingerprints | #24221, #24954, #30862 |
| T2-recompute | T2 | fingerprints (with recompute distances) | #37836, #31833, #33450, #30862, #29368, #24221, #29973 |
| T2-working-state | T2 | events (working-state comparisons) | #29368, #24954 |
| cow-copy | T3 | events (with fingerprints) | #35821, copy-on-write / clear races |
| write-ran | 3 | events (track writes that ran) | #32555, #31099/#32606, #30862, #24613/#39342, #37817 |
| write-target | 5 | events (track writes that ran) | #34184, #24221 |
| cow-ran | 7 | events (copy-on-writes that ran) | #24954 |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..errors import McinspectError
from .content import CONTENT, check_content
from .cow_copy import COW_COPY, check_cow_copy
from .cross_rank import TP_AGREE, across_ranks_only
from .depth import DEPTH, check_depth
from .history import StepView
from .kv import KV, check_kv
from .lru import LRU, check_lru_order
from .provenance import COW, PLAN_SAFETY, PROVENANCE, check_cow, check_plan_safety, check_provenance
from .recompute import RECOMPUTE, check_recompute, tolerance_text
from .slots import PARTITION, REQUEST_SLOTS, check_partition, check_request_slots
from .tree import LOCKS, SHAPE, check_locks, check_shape
from .violation import Violation
from .working_state import WORKING, check_working_state
from .writes import COW_RAN, WRITE_RAN, WRITE_TARGET, check_cow_ran, check_write_ran, check_write_target

Need = Literal["metadata", "events", "fingerprints", "engine-info"]
"""metadata: nodes, slot claims, requests, KV of one state (and the previous one, for what
changed); events: the step's events and the slot ledger folded from earlier steps;
fingerprints: `CacheState.contents`; engine-info: `EngineInfo` (strategy, overlap)."""


class UnknownCheck(McinspectError, LookupError):
    """A check name that is not in the registry."""


@dataclass(frozen=True)
class CheckSpec:
    """One registered check."""

    name: str
    invariant: str
    """Its number among the mamba cache invariants (`mcinspect checks` lists them: "1".."9", "T1")."""
    description: str
    targets: tuple[str, ...]
    """Upstream bug classes (sgl-project/sglang issue or PR numbers) it is meant to catch."""
    needs: tuple[Need, ...]
    checked: str
    """Which parts of the invariant it checks."""
    blind_to: str
    """What it cannot see: parts needing data the schema does not carry, and tolerances."""
    run: Callable[[StepView], list[Violation]]


CHECKS: dict[str, CheckSpec] = {
    spec.name: spec
    for spec in (
        CheckSpec(
            name=PARTITION,
            invariant="1",
            description="every mamba slot has exactly one owner; none is leaked or outside the pool",
            targets=("#24221", "leaked slot", "slot owned twice"),
            needs=("metadata",),
            checked="one owner per slot among free / tree / working / ping-pong / admission (a copy-on-write "
            "source is a reference, not an owner); 'unaccounted' slots are leaks; slot 0 never claimed; "
            "slot ids named by nodes and requests lie in 1..size",
            blind_to="slots held by requests the adapter does not enumerate (PD-disaggregation queues) read as "
            "leaks; int8 checkpoint pools (tree values index another pool) are not modelled",
            run=check_partition,
        ),
        CheckSpec(
            name=REQUEST_SLOTS,
            invariant="2",
            description="live requests hold a working slot and a well-formed ping-pong buffer",
            targets=("donated slot -1 (SGLANG_MAMBA_DEBUG_ASSERTS)", "#24613", "#24221"),
            needs=("metadata", "engine-info"),
            checked="working slot > 0; empty flags match -1 entries; next/last track index in range; the "
            "last-tracked entry is a slot when a state was tracked; the device mirrors the forward writes and "
            "free_mamba_cache frees (req_index_to_mamba_index_mapping, ..._ping_pong_track_buffer_mapping) "
            "name the record's slots; with EngineInfo: buffer length (2 with overlap, 1 without) and no empty "
            "entry under eager extra_buffer",
            blind_to="mirrors of requests without a req_to_token row; speculative decoding's extra track slots",
            run=check_request_slots,
        ),
        CheckSpec(
            name=PROVENANCE,
            invariant="3",
            description="a cached state was written for its request after the slot's last allocation",
            targets=("#30862", "#24613", "#22876", "#31850", "#29349"),
            needs=("events",),
            checked="donated slot: the latest planned write since its allocation exists and is the inserting "
            "request's; without an allocation in the history, the slot was that request's ping-pong slot "
            "at the previous boundary; no_buffer (EngineInfo): a fresh copy or the request's working slot",
            blind_to="that the planned write actually ran (a kernel writing the wrong state at the right slot, "
            "#37836, only content checks catch); history shorter than the slot's life; speculative "
            "decoding's track plans are not captured",
            run=check_provenance,
        ),
        CheckSpec(
            name=DEPTH,
            invariant="4",
            description="a cached state sits at the depth it was computed for",
            targets=("#38815", "#39209", "#34808", "#35412", "#39115", "#35694", "#29792", "#24590"),
            needs=("events",),
            checked="planned position of a donated slot == inserted key length == node end depth; a matched "
            "copy-on-write resumes at its node's end depth; a node holding a slot never moves its end; "
            "a live request's tracked depth <= its allocated KV",
            blind_to="the checkpoint grid lcm(mamba chunk size, page size) is not in the schema (page alignment "
            "is in kv-pages); no_buffer states carry no planned position",
            run=check_depth,
        ),
        CheckSpec(
            name=PLAN_SAFETY,
            invariant="5",
            description="no forward is planned to write into a slot the tree owns",
            targets=("#24954", "#24221"),
            needs=("events",),
            checked="each track plan's slot is not tree-owned at the moment of the plan (a donated slot also "
            "still in the ping-pong list is reported by slot-partition)",
            blind_to="writes that are not track plans (deferred copy-on-write destinations, speculative intermediate states)",
            run=check_plan_safety,
        ),
        CheckSpec(
            name=LOCKS,
            invariant="6",
            description="lock refs add up along the tree",
            targets=("#12007", "lock leak", "double release"),
            needs=("metadata",),
            checked="full - sum(children's full) (locks anchored at a node) >= 0; mamba lock <= anchored; "
            "anchored >= live requests whose last_node is the node",
            blind_to="equality with live requests (HiCache write-through, streaming sessions and load-backs "
            "hold locks no request shows; SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK and extra_buffer_lazy release "
            "MAMBA locks early); evictable/protected size ledgers (not in the schema); the Rust tree core "
            "shows no lock refs",
            run=check_locks,
        ),
        CheckSpec(
            name=COW,
            invariant="7",
            description="a copy-on-write reads a cached state of the matched node",
            targets=("#35821",),
            needs=("events",),
            checked="at the match, the source is tree-owned by the matched node, which has a key; it is not "
            "freed or evicted between the match and the request's admission; a pending source is "
            "tree-owned, differs from the working slot, and its node holds a lock",
            blind_to="that the source node stays locked until the deferred copy runs on the forward stream "
            "(lock timing inside a step is not in the schema)",
            run=check_cow,
        ),
        CheckSpec(
            name=SHAPE,
            invariant="8",
            description="the radix tree is well formed and its mamba-bearing nodes keep KV and sit in the LRU",
            targets=("#12007", "#35821"),
            needs=("metadata",),
            checked="one root; parents exist; depth == parent end (which also rules out cycles); non-root keys "
            "non-empty; KV length == key length; a child on device has its parent on device; mamba state "
            "needs KV; mamba state <=> mamba LRU membership (Python core); a split parent gets no state "
            "unless an insert gives it one",
            blind_to="nodes off request paths on the Rust tree core; evictable-leaf set membership",
            run=check_shape,
        ),
        CheckSpec(
            name=LRU,
            invariant="10",
            description="the mamba LRU list is in access order (eviction takes the least recently used state first)",
            targets=("#12007",),
            needs=("metadata",),
            checked="each node of the list is followed by a node that is in the list, holds a state, and was "
            "accessed no later (MambaRadixCache: its linked list against last_access_time)",
            blind_to="0.5.22+ (the UnifiedTreeCore's LRU is not shown as a list) and the full LRU list",
            run=check_lru_order,
        ),
        CheckSpec(
            name=KV,
            invariant="9",
            description="KV rows match the tree, and no KV token in use is free",
            targets=("KV use-after-free", "row/tree divergence"),
            needs=("metadata",),
            checked="req_to_token[row, :cache_protected_len] == the path's KV; path nodes keep their KV; tree "
            "and row tokens are not on the free list; node boundaries and KV indices on page boundaries",
            blind_to="KV of requests' tails against other requests' rows (double allocation between two "
            "requests); SWA and host (HiCache) pools",
            run=check_kv,
        ),
        CheckSpec(
            name=CONTENT,
            invariant="T1",
            description="a cached state never changes while its node holds it, and no slot in use holds NaN/Inf",
            targets=("#24221", "#24954", "#30862"),
            needs=("fingerprints", "events"),
            checked="a tree-owned slot's newer fingerprint equals the last one taken under the same node; "
            "fingerprints taken at this boundary: no NaN/Inf in a slot in use, no all-zero tree slot",
            blind_to="changes undone before the next fingerprint (the engine re-fingerprints a cached slot every "
            "4 captures, or per MCINSPECT_FINGERPRINT_BUDGET on GPUs); slots the engine did not fingerprint again",
            run=check_content,
        ),
        CheckSpec(
            name=RECOMPUTE,
            invariant="T2",
            description="a cached state equals the state of its node's prefix recomputed alone",
            targets=("#37836", "#31833", "#33450", "#30862", "#29368", "#24221", "#29973", "#32555"),
            needs=("fingerprints",),
            checked="each verified tree slot: conv (every conv tensor) and temporal state within relative L2 of "
            f"the oracle's tolerance (engine: {tolerance_text('engine', 'extend')} for a state a prefill wrote, "
            f"{tolerance_text('engine', 'decode')} for one decode steps wrote; transformers: "
            f"{tolerance_text('transformers')}) of the owning node's prefix recomputed alone: by the engine's "
            "own forward pass (any model, device, TP shard; MCINSPECT_VERIFY=engine) or transformers' "
            "implementation of the embedded engine's tiny model; the violation names the forward that wrote "
            "the state (request, batch size, its position, extend lengths)",
            blind_to="states evicted before their turn in the budget (MCINSPECT_VERIFY_SHARE / _RATE) or while the "
            "pools had no room for a reference without evicting; a bug inside the prefill kernel itself under "
            "the engine oracle alone (both sides share it: the transformers oracle sees it); differences "
            "below the tolerance",
            run=check_recompute,
        ),
        CheckSpec(
            name=WORKING,
            invariant="T2",
            description="a running request's working state equals its whole prefix recomputed alone",
            targets=("#29368", "#24954", "lost copy-on-write into the working slot"),
            needs=("events",),
            checked="sampled running requests (those that took a prefix from the cache first), at step boundaries "
            "with no forward in flight: the working slot against the request's tokens so far (cached part and "
            "computed suffix) prefilled alone, within the oracle's tolerance",
            blind_to="requests never sampled (MCINSPECT_VERIFY_WORKING share of the budget); boundaries with a "
            "forward in flight on an accelerator; speculative decoding and mixed chunks (skipped)",
            run=check_working_state,
        ),
        CheckSpec(
            name=WRITE_RAN,
            invariant="3",
            description="every slot donated to the tree was written by a forward, for its request, at its node's position",
            targets=("#32555", "#31099", "#32606", "#30862", "#24613", "#39342", "#37817"),
            needs=("events",),
            checked="an extra_buffer donation (InsertEvent with a ping-pong index): the latest track write a forward "
            "ran into the slot since its allocation (TrackWriteEvent: the destinations the state-tracking copy "
            "used, read inside the forward) exists, was planned by the inserting request, and is for the position "
            "the node is labelled with",
            blind_to="forwards replayed from a CUDA graph (the copy's Python function does not run there); no_buffer "
            "(no track writes: its states are copies of the working slot); history shorter than the slot's life; "
            "what the write held (the T2 checks)",
            run=check_write_ran,
        ),
        CheckSpec(
            name=WRITE_TARGET,
            invariant="5",
            description="no track write a forward ran lands in a cached, free or foreign slot",
            targets=("#34184", "#24221"),
            needs=("events",),
            checked="every slot a forward's state-tracking copy wrote: not tree-owned at the time, planned by a row "
            "of its batch, and that request's ping-pong or working slot at this boundary or the previous one (or "
            "allocated in this step); the padding slot 0 is left out",
            blind_to="writes other than the track copies (kernel bugs writing out of bounds); CUDA-graph replays",
            run=check_write_target,
        ),
        CheckSpec(
            name=COW_RAN,
            invariant="7",
            description="every copy-on-write the scheduler recorded ran before the forward that reads it",
            targets=("#24954", "a deferred copy-on-write not carried to the next forward"),
            needs=("events",),
            checked="a request admitted with a matched copy-on-write source: the first deferred copy-and-clear of a "
            "forward after its admission (CowEvent) copies that source into the request's working slot",
            blind_to="copies whose forward runs after the next step boundary (overlap disabled for consecutive "
            "prefills, SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP); what the copy wrote (T3 cow-copy)",
            run=check_cow_ran,
        ),
        CheckSpec(
            name=COW_COPY,
            invariant="T3",
            description="after a copy-on-write the working slot equals its source; a cleared slot is zero",
            targets=("#35821", "copy-on-write / clear racing the forward"),
            needs=("events",),
            checked="the fingerprints the engine takes right after the deferred copy and clears ran "
            "(ModelRunner._maybe_execute_deferred_mamba_cow_and_clear), before the forward extends the slots",
            blind_to="int8 checkpoint pools (a dequantised copy is not bit-equal); that the source itself was the right state (T1, T2)",
            run=check_cow_copy,
        ),
        CheckSpec(
            name=TP_AGREE,
            invariant="TP",
            description="the tensor-parallel ranks agree on the tree, every slot's owner and the requests' slots at each step",
            targets=("a TP rank whose bookkeeping diverges (its heads get wrong states)",),
            needs=("metadata",),
            checked="each rank's recording against rank 0's at every step both hold (`demo --tp N --record`, "
            "`record` of a TP engine: one file per rank); every node field but last_access, every slot claim, every request record",
            blind_to="one rank's view alone (a single recording or snapshot, a live check); slot contents, which differ "
            "by design (each rank holds its heads' shard)",
            run=across_ranks_only,
        ),
    )
}

NOT_CHECKED: dict[str, str] = {
    "1 (admission groups)": "pre-allocations appear as 'admission' claims only while a group is open; capture "
    "runs outside groups, so a slot leaked by an admission group shows as 'unaccounted' (a leak) instead",
    "4 (checkpoint grid)": "mamba_cache_chunk_size is not in EngineInfo: only page alignment is checked",
    "6 (size ledgers)": "component_evictable_size_ / component_protected_size_ are not in the schema",
    "T2": "checked (T2-recompute, T2-working-state) where the engine verifies (MCINSPECT_VERIFY); states it "
    "had no budget or room for carry no distances",
}
"""Invariant parts no check covers, and the data each would need."""
