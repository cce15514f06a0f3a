"""The wire contract between engine_hooks (inside sglang) and the mcinspect client.

msgspec Structs, msgpack on the wire, JSON in files. Top-level messages are tagged structs so a
decoder rejects anything it does not know; the schema version travels in every message, and a
mismatch is an error, not a guess. Nothing here imports sglang or torch.

The cache state of one scheduler process at one step is a `CacheState`: tree nodes, the claims
on every mamba slot, the requests, and the KV allocator. The engine sends a full `Snapshot` on
request and a `Delta` per step on the stream; applying deltas in `seq` order to a snapshot
reproduces the engine's state at each step (`apply_delta`).
"""

from __future__ import annotations

import array
import gc
import hashlib
from typing import Literal, NewType

import msgspec

from .run_edits import Runs, edit_runs, edited_leniently

SCHEMA_VERSION = 4
"""Bumped on any incompatible change of the structs below."""
OLDEST_READABLE_SCHEMA = 2
"""Files (recordings, snapshots) from this schema version on decode as this one's: 3 only added
`Delta.grown_requests`, 4 `Delta.kv_edit`, each with a default. The live wire takes
SCHEMA_VERSION alone (an older client would drop what the new fields say)."""

MAX_REQUEST_BYTES = 64 * 1024
"""Requests larger than this are rejected unread: no client request needs more."""

STREAM_TOPIC = b"delta"
"""First frame of every stream message: [STREAM_TOPIC, seq (8 bytes, big-endian), msgpack Delta]."""

EVERY_STEP_TOPIC = b"every-step"
"""A subscription that matches no message: a client that also subscribes to it asks the engine
to capture every scheduler step (a recorder, a checker). Without one, subscribers get the live
stream: captures as often as the inspector's time budget allows (engine_hooks/live_cadence.py).
ZMQ tells the engine when the last such subscriber leaves, also when its process dies."""

INLINE_TOKENS = 32
"""A node carries its whole key up to this many tokens, else the first INLINE_TOKENS."""

NodeId = NewType("NodeId", int)
"""sglang tree node id (`UnifiedTreeNode.id`); -1 means none."""
SlotId = NewType("SlotId", int)
"""Index into the mamba pool (1..size; 0 is sglang's dummy slot)."""
Rid = NewType("Rid", str)
"""sglang request id."""
Step = NewType("Step", int)
"""Scheduler step: `process_batch_result` calls since the hooks started."""
Seq = NewType("Seq", int)
"""Per-process sequence number of published deltas; consecutive, starting at 1."""


class _Message(msgspec.Struct, tag=True, forbid_unknown_fields=True, frozen=True):
    pass


# --- state --------------------------------------------------------------------------------


class NodeRecord(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One radix tree node as of a step."""

    id: NodeId
    parent: NodeId
    depth: int
    """Tokens from the root to the start of this node's key."""
    key_len: int
    tokens: bytes
    """The key's token ids as little-endian int32 (`pack_tokens`): all of them, or the first
    INLINE_TOKENS when longer. Bytes, not a list: a million nodes decode 2x faster."""
    key_hash: int
    """64-bit hash of the whole key (see `key_hash`)."""
    kv_runs: Runs
    """The node's KV token indices (FULL value); empty when evicted."""
    kv_evicted: bool
    mamba_slot: SlotId
    """Mamba slot holding the state at depth + key_len; -1 for none (tombstone or split parent)."""
    full_lock: int
    mamba_lock: int
    in_full_lru: bool
    in_mamba_lru: bool
    evictable: bool
    last_access: float
    hit_count: int
    tombstone: bool
    """sglang keeps the node but its mamba state was evicted (mamba value None, not a split)."""
    mamba_lru_older: NodeId = NodeId(-1)
    """The next less recently used node of the mamba LRU list, where sglang keeps one as a
    linked list (MambaRadixCache, 0.5.12-0.5.15); -1 for the oldest, outside the list, or on
    generations whose LRU is not shown this way (0.5.22+). Check `mamba-lru`."""

    @property
    def token_ids(self) -> list[int]:
        return unpack_tokens(self.tokens)


SlotKind = Literal["free", "tree", "working", "ping_pong", "cow_source", "admission", "unaccounted"]


class SlotClaim(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One claim on a mamba slot. A healthy slot has exactly one claim; more is a bug."""

    slot: SlotId
    kind: SlotKind
    node: NodeId = NodeId(-1)
    rid: Rid = Rid("")
    ping_pong_index: int = -1
    last_tracked: bool = False
    """For ping_pong: this is the entry `mamba_last_track_idx` points at."""
    seqlen: int = -1
    """For ping_pong (last tracked): `mamba_last_track_seqlen`; for tree: node end depth."""


RequestState = Literal["waiting", "running", "chunked", "finished"]


class RequestRecord(msgspec.Struct, frozen=True, gc=False):
    """A request the scheduler holds, with its `req.kv` mamba fields."""

    rid: Rid
    state: RequestState
    row: int
    """`req.kv.req_pool_idx` (req_to_token row); -1 before allocation."""
    prompt_len: int
    output_len: int
    prefix_len: int
    cache_protected_len: int
    committed_len: int
    allocated_len: int
    last_node: NodeId
    working_slot: SlotId
    ping_pong: list[SlotId]
    ping_pong_empty: list[bool]
    next_track_idx: int
    last_track_idx: int
    last_track_seqlen: int
    prev_track_seqlen: int
    cow_source: SlotId
    needs_clear: bool
    kv_runs: Runs
    """`req_to_token[row, :allocated_len]`."""
    working_mirror: SlotId = SlotId(-1)
    """The device mirrors the forward reads its slots from (`req_index_to_mamba_index_mapping[row]`,
    `req_index_to_mamba_ping_pong_track_buffer_mapping[row]`): -1 / [] without a row or mirror."""
    ping_pong_mirror: list[SlotId] = []


class RequestGrowth(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A request whose record moved only as decoding moves it: its new lengths and the KV runs
    its row grew by. Sent instead of the whole record, whose `kv_runs` (a run per decoded token
    at page size 1: each decode step takes one token per row of one contiguous allocation) made
    every delta grow with every running request's length."""

    rid: Rid
    output_len: int
    committed_len: int
    allocated_len: int
    added_runs: Runs
    """Runs appended to the record's `kv_runs`; the first joins its last when contiguous."""


class KvState(msgspec.Struct, frozen=True):
    """The KV token allocator."""

    page_size: int
    size: int
    """Token slots in the pool."""
    free_runs: Runs
    """Free token indices (whole free pages expanded to their tokens)."""


class KvEdit(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """How a step changed the KV free runs: the token runs taken out of them and those put back
    (each sorted). Sent instead of the whole `KvState` when the engine read the change (its
    allocators take a slice of a free list's front and put pages before or after it): a
    fragmented pool's whole free list is tens of thousands of runs at every step that allocates."""

    removed: Runs
    added: Runs


class BatchOrigin(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The forward that wrote a state: which request, and the batch it ran in (a #37836-class
    bug shows as "the second request of a 3-request extend batch")."""

    rid: Rid
    step: Step
    """The step boundary that followed the forward (the first capture that could show it)."""
    forward: Literal["extend", "decode", "finish"]
    """extend / decode: the track write planned for that forward; finish: no_buffer's working
    slot, cached as the request ended (its last forward is not tracked)."""
    batch_size: int
    position: int
    """The request's index in the batch (0-based); -1 when not known."""
    extend_lens: list[int] = []
    """Every request's extend length in that batch (extend forwards)."""
    seqlen: int = -1
    """The position of the state written (tokens from the start of the request)."""


class SlotContent(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What a slot held when it was last fingerprinted (after the producing forward finished)."""

    slot: SlotId
    fingerprint: int
    """64-bit fingerprint of the slot's conv and temporal state over all mamba layers
    (mcinspect_kernels.fingerprint: bit-exact, identical on the Triton and torch paths)."""
    nonfinite: int
    """NaN/Inf elements found in the same pass."""
    zero: bool
    """Every element is zero (a cleared slot)."""
    step: Step
    """The step whose boundary the fingerprint was taken at."""
    # --- T2 recompute (engine_hooks/verifier.py, MCINSPECT_VERIFY) ---
    recompute_conv_rel_l2: float = -1.0
    """||conv - recomputed conv|| / ||recomputed conv|| over all mamba layers, the recompute being
    the owning node's prefix run alone (mcinspect_kernels.state_distance); -1.0: not verified."""
    recompute_temporal_rel_l2: float = -1.0
    """The same for the temporal (SSM) state. Kept apart from conv: the conv window's norm is
    ~100x the SSM state's, so one combined distance would hide a wrong SSM state."""
    recompute_oracle: str = ""
    """Which oracle produced the distances: "engine" (the engine's own forward pass, prefilled
    alone from an empty state: engine_hooks/reference.py) or "transformers" (an independent
    implementation on the CPU: the embedded engine only); "" in recordings from before the
    field (transformers then)."""
    recompute_node: NodeId = NodeId(-1)
    """The node whose prefix was recomputed (-1: not verified, or not known)."""
    origin: BatchOrigin | None = None
    """The forward that wrote the verified state, where the engine saw it."""


class CacheState(msgspec.Struct):
    """Everything mcinspect knows about one scheduler process's cache at one step."""

    step: Step
    nodes: dict[NodeId, NodeRecord]
    slots: dict[SlotId, list[SlotClaim]]
    """Every slot 1..size with its claims (free slots: one `free` claim)."""
    requests: dict[Rid, RequestRecord]
    kv: KvState
    contents: dict[SlotId, SlotContent] = {}
    """Fingerprints of tree-owned slots and of slots whose owner changed (when capture is on)."""


# --- events -------------------------------------------------------------------------------


class _Event(msgspec.Struct, tag=True, frozen=True):
    step: Step


class MatchEvent(_Event):
    rid: Rid
    hit_len: int
    node: NodeId
    cow_source: SlotId


class InsertEvent(_Event):
    """A state entered the tree: `slot` is now `node`'s mamba value (donated or copied)."""

    rid: Rid
    node: NodeId
    slot: SlotId
    seqlen: int
    ping_pong_index: int


class EvictEvent(_Event):
    nodes: list[NodeId]
    slots: list[SlotId]
    tokens: int


class LockEvent(_Event):
    node: NodeId
    rid: Rid
    locked: bool


class SlotEvent(_Event):
    slots: list[SlotId]
    allocated: bool
    """True for alloc, False for free."""


class TrackPlanEvent(_Event):
    """The next forward writes the state at `position` of `rid` into `slot`."""

    rid: Rid
    slot: SlotId
    position: int
    forward: Literal["", "extend", "decode"] = ""
    """The forward the plan is for ("" in recordings from before the field)."""


class TrackWriteEvent(_Event):
    """The track writes one forward actually ran, as the model forward received them (after
    `mix_with_running` / `merge_batch`, padding, graph buffers): per batch row its request, whether
    the row was tracked (`mask`), the destination the batch planned for it and the position it
    tracks; and `written`, every slot the state-tracking copy wrote into. A planned destination
    missing from `written` is a write that never ran (#30862, #24613, #32555); a written slot no
    row planned is a stray write (#34184)."""

    forward: Literal["extend", "decode", "mixed"]
    rids: list[Rid]
    """Per batch row ("" for a padded row or one mcinspect could not attribute)."""
    mask: list[bool]
    """Per row: the copy was told to track it."""
    planned: list[SlotId]
    positions: list[int]
    written: list[SlotId]
    """Destinations the copy wrote as it received them (an extend forward's destination tensors)."""
    bound: list[SlotId] = []
    """Per row, the destination the copy was handed (a decode copy): it wrote `bound[i]` for the
    rows in `mask`."""

    def written_slots(self) -> list[SlotId]:
        """Every slot the copy wrote."""
        return [*self.written, *(slot for slot, on in zip(self.bound, self.mask) if on)]


class CowEvent(_Event):
    """An extend forward's deferred copy-on-write and clears, fingerprinted right after they
    ran, before its layers extend the working slots (T3): `destinations[i]` received a copy of
    `sources[i]`; `cleared[i]` was zeroed (`cleared_zero[i]`: it reads all zeros)."""

    sources: list[SlotId]
    destinations: list[SlotId]
    source_fingerprints: list[int]
    destination_fingerprints: list[int]
    cleared: list[SlotId]
    cleared_zero: list[bool]


class WorkingStateEvent(_Event):
    """A running request's working slot compared with its whole prefix (cached part and computed
    suffix) recomputed alone by `oracle`, at a step boundary with no forward in flight: a lost
    copy-on-write or a kernel that ignores the initial state after a prefix hit (#29368,
    #24954) corrupts the output without ever caching a wrong state."""

    rid: Rid
    slot: SlotId
    seqlen: int
    """Tokens the working state covers."""
    prefix_len: int
    """Tokens the request took from the cache at admission (0: no hit)."""
    conv_rel_l2: float
    temporal_rel_l2: float
    oracle: str
    forward: Literal["extend", "decode"] = "decode"
    """The request's last forward before the comparison (prefill or decode)."""


class RequestEvent(_Event):
    rid: Rid
    what: Literal["admit", "finish", "retract"]


class HookErrorEvent(_Event):
    hook: str
    message: str


Event = (
    MatchEvent
    | InsertEvent
    | EvictEvent
    | LockEvent
    | SlotEvent
    | TrackPlanEvent
    | TrackWriteEvent
    | CowEvent
    | WorkingStateEvent
    | RequestEvent
    | HookErrorEvent
)


# --- counters and engine identity ---------------------------------------------------------


class Counters(msgspec.Struct, frozen=True):
    """Health of the hooks in one process; shown by every client."""

    published: int = 0
    dropped: int = 0
    """Deltas the bounded queue could not take (a client will see a gap and resync)."""
    hook_errors: int = 0
    rejected_requests: int = 0
    unobserved_steps: int = 0
    """Steps whose events are gone: not captured because no client was subscribed, or skipped
    by the live stream's time budget (the state caught up at the next capture)."""

    def events_continue(self, previous: Counters) -> bool:
        """Whether a frame with these counters carries every event since one with `previous`:
        no delta dropped, no hook failed, no step went unobserved in between."""
        return (self.dropped, self.hook_errors, self.unobserved_steps) == (
            previous.dropped,
            previous.hook_errors,
            previous.unobserved_steps,
        )


class EngineInfo(_Message):
    """Who answered: the engine's configuration as this scheduler process sees it."""

    schema_version: int
    sglang_version: str
    model_path: str
    strategy: str
    page_size: int
    overlap: bool
    tree_core: str
    full_tree_detail: bool
    """False on sglang's Rust tree core: nodes off request paths are not visible."""
    mamba_pool_size: int
    kv_pool_tokens: int
    tp_rank: int
    dp_rank: int
    pid: int
    request_port: int
    stream_port: int
    verify: str = "off"
    """The T2 oracles verifying cached states in this process: "engine", "transformers",
    "both" or "off" (MCINSPECT_VERIFY)."""
    verify_share: float = 0.0
    """The share of the scheduler's busy time reference prefills may take (MCINSPECT_VERIFY_SHARE)."""
    verify_rate: float = 0.0
    """At most this many reference prefills a second (MCINSPECT_VERIFY_RATE)."""
    track_writes: Literal["", "extend", "all"] = ""
    """Which forwards' track writes the engine reports (TrackWriteEvent): "all" (eager forwards),
    "extend" (decode steps are replayed from CUDA graphs, whose copies no hook sees), "" (none:
    an engine or recording from before the hooks)."""
    # Added after schema 2 was released, with defaults, so older files still decode.
    model_family: str = ""
    """The hybrid family of the model ("qwen3-next", "nemotron-h", "qwen3.5"); "" unknown."""
    state_layout: str = ""
    """What the family's conv channels and temporal axes are; "" unknown."""
    conv_shapes: tuple[tuple[int, ...], ...] = ()
    """Per conv tensor of the mamba pool: [mamba layers, channels, kernel - 1] (one slot)."""
    conv_dtypes: tuple[str, ...] = ()
    temporal_shape: tuple[int, ...] = ()
    """[mamba layers, ...] of one slot's temporal state."""
    temporal_dtype: str = ""
    state_bytes_per_slot: int = 0
    """Conv and temporal bytes of one mamba slot, all layers."""
    hooks_generation: str = ""
    """The sglang generation the hooks read (engine_hooks/generations.py); "" unknown."""
    hooks_skipped: tuple[str, ...] = ()
    """Hook targets of that generation's table this sglang release lacks."""
    unsupported: str = ""
    """Non-empty: this sglang release is not one mcinspect reads; why, in one line (nothing
    else is served)."""
    rank: int = 0
    """This scheduler process's rank among the engine's (engine_hooks/placement.py): its
    inspector ports are PORT + 2 * rank."""
    world_size: int = 0
    """The engine's scheduler processes, ranks 0 to world_size - 1; 0: not known (an engine
    or a recording from before this field)."""
    tp_size: int = 1
    pp_rank: int = 0
    attn_dp_size: int = 1
    """sglang's attention data parallelism: the TP group's attention groups, each scheduling its
    own requests (`dp_rank` is then the group); ranks agree only within a group."""


# --- requests (client -> engine) ----------------------------------------------------------


class Hello(_Message):
    """First request of a session: the client's schema version and, off loopback, a token."""

    schema_version: int
    token: str = ""


class GetSnapshot(_Message):
    schema_version: int
    token: str = ""


class GetHistory(_Message):
    """Deltas with seq > after_seq still held in the engine's bounded history window."""

    schema_version: int
    after_seq: int
    token: str = ""


class GetStats(_Message):
    schema_version: int
    token: str = ""


class StartVerify(_Message):
    """Verify these tree nodes' states now (or every node holding one): answered with a
    `VerifyStatus` whose ticket `GetVerify` polls while the scheduler works through them."""

    schema_version: int
    nodes: list[NodeId] = []
    all: bool = False
    token: str = ""


class GetVerify(_Message):
    schema_version: int
    ticket: int
    token: str = ""


Request = Hello | GetSnapshot | GetHistory | GetStats | StartVerify | GetVerify


# --- replies and stream messages (engine -> client) ---------------------------------------


class Snapshot(_Message):
    schema_version: int
    seq: Seq
    """The last delta seq this snapshot already includes."""
    state: CacheState
    counters: Counters


class Delta(_Message):
    """What changed in one step, and what happened during it."""

    schema_version: int
    seq: Seq
    step: Step
    upsert_nodes: list[NodeRecord]
    removed_nodes: list[NodeId]
    slots: dict[SlotId, list[SlotClaim]]
    """Slots whose claims changed, with their full new claim list."""
    upsert_requests: list[RequestRecord]
    removed_requests: list[Rid]
    kv: KvState | None
    """The new allocator state if it changed and was read whole, else None."""
    events: list[Event]
    counters: Counters
    contents: dict[SlotId, SlotContent] = {}
    """New fingerprints taken at this step's boundary."""
    removed_contents: list[SlotId] = []
    """Slots whose fingerprint no longer describes them (they left the tree)."""
    grown_requests: list[RequestGrowth] = []
    """Requests that only decoded since their last record (applied after `upsert_requests`)."""
    kv_edit: KvEdit | None = None
    """The allocator's change, when `kv` is None and it changed (`edited_kv`)."""


class History(_Message):
    schema_version: int
    deltas: list[Delta]
    oldest_seq: Seq
    """Oldest seq still held; a client that needs older must take a snapshot."""


class SlotLayout(msgspec.Struct, frozen=True):
    """The mamba slots one running request holds: a working slot and its ping-pong slots."""

    rid: Rid
    working: SlotId
    ping_pong: list[SlotId]


class VerifyStats(msgspec.Struct, frozen=True):
    """What the T2 verifier did in one scheduler process."""

    queued: int = 0
    """States waiting for a reference prefill now."""
    verified: int = 0
    """Cached states compared with a recompute (all oracles together)."""
    working: int = 0
    """Running requests' working states compared."""
    mismatches: int = 0
    """Comparisons (cached or working) beyond the oracle's tolerance (mcinspect.checks.recompute)."""
    no_room: int = 0
    """Times a reference waited because the pools had no room without evicting."""
    gone: int = 0
    """States that left the tree (evicted, replaced) before their turn."""
    failed: int = 0
    """Reference prefills that raised (counted, logged once; the engine is unaffected)."""
    seconds: float = 0.0
    """Scheduler-thread time spent in reference prefills and their comparisons."""
    busy_seconds: float = 0.0
    """The part of `seconds` spent while requests were running (the rest ran while idle)."""
    tokens: int = 0
    """Tokens prefilled by references."""


class Stats(_Message):
    """Running counters of one scheduler process, as of `step`."""

    schema_version: int
    step: Step
    mamba_pool_size: int
    mamba_slots_in_use: int
    """Out of the allocator's free list when the reply was made."""
    mamba_slots_peak: int
    """The most in use at a sampled step boundary (every captured step, every 16th step nobody
    observed) or now."""
    evicted_mamba_slots: int
    evicted_tokens: int
    hook_errors: int
    slots_per_request: dict[int, int]
    """Histogram: slots held by one running request (working + ping-pong) -> observations (at
    every 16th step boundary)."""
    example_layouts: list[SlotLayout]
    """One observed layout per distinct slot count, for the record."""
    counters: Counters = Counters()
    self_check_steps: int = 0
    """Steps verified by the engine-side self-check (MCINSPECT_SELF_CHECK=1), else 0."""
    self_check_failures: int = 0
    self_check_first_failure: str = ""
    hook_seconds: float = 0.0
    """Time the scheduler thread spent inside mcinspect's hooks, captures included; not the
    set-up at engine start (importing mcinspect, the first full capture, binding the ports)."""
    verify: VerifyStats = VerifyStats()
    paths: dict[str, int] = {}
    """How often each cache path ran: prefill / decode checkpoints, chunk / finish donations,
    copy-on-writes, mixed batches (engine_hooks/state_log.py)."""
    request_seconds: float = 0.0
    """CPU time the request thread spent answering (it holds the GIL the scheduler needs)."""
    next_step_observed: bool = False
    """The step starting now will be captured with its events (a subscriber watches): a
    recording that starts before a workload waits for it, so it holds the first step's events."""


class NodeVerdict(msgspec.Struct, frozen=True):
    """One node's state compared with a recompute, for `mcinspect verify`."""

    node: NodeId
    slot: SlotId
    tokens: int
    oracle: str
    conv_rel_l2: float
    temporal_rel_l2: float
    error: str = ""
    """Why it could not be verified ("" when it was)."""
    forward: str = ""
    """The forward that wrote the state, where the engine saw it ("extend", "decode", "finish")."""
    skipped: bool = False
    """Not verified because of the engine's load (the node evicted while it waited, no KV room
    for the prefix without evicting): under `verify --all` a skip, not a failure."""


class VerifyStatus(_Message):
    """Progress and results of a `StartVerify`."""

    schema_version: int
    ticket: int
    total: int
    results: list[NodeVerdict]
    done: bool


class ErrorReply(_Message):
    """The request was refused; `reason` is one line meant for a person."""

    schema_version: int
    reason: str


Reply = EngineInfo | Snapshot | History | Stats | VerifyStatus | ErrorReply

reply_decoder = msgspec.msgpack.Decoder(Reply)
encoder = msgspec.msgpack.Encoder()
# Records are gc=False: they only hold ints, strings and lists of them, so they can never be
# part of a reference cycle, and a million tracked records make the collector dominate decoding.


def decode_reply(payload: bytes | memoryview) -> Reply:
    """`reply_decoder.decode` with the cyclic GC paused: snapshots allocate millions of
    acyclic objects, and collections triggered mid-decode would triple the time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return reply_decoder.decode(payload)
    finally:
        if enabled:
            gc.enable()


# --- helpers shared by both ends ----------------------------------------------------------


def apply_delta(state: CacheState, delta: Delta) -> None:
    """Apply `delta` to `state` in place (the caller checks seq order)."""
    state.step = delta.step
    for node_id in delta.removed_nodes:
        state.nodes.pop(node_id, None)
    for node in delta.upsert_nodes:
        state.nodes[node.id] = node
    state.slots.update(delta.slots)
    for rid in delta.removed_requests:
        state.requests.pop(rid, None)
    for request in delta.upsert_requests:
        state.requests[request.rid] = request
    for growth in delta.grown_requests:
        record = state.requests.get(growth.rid)
        if record is not None:  # absent only past a seq gap, which its reader reports already
            state.requests[growth.rid] = grown(record, growth)
    if delta.kv is not None:
        state.kv = delta.kv
    elif delta.kv_edit is not None:
        state.kv = edited_kv(state.kv, delta.kv_edit)
    for slot in delta.removed_contents:
        state.contents.pop(slot, None)
    state.contents.update(delta.contents)


def grown(record: RequestRecord, growth: RequestGrowth) -> RequestRecord:
    """`record` as `growth` moved it (a new record: records are never edited)."""
    return msgspec.structs.replace(
        record,
        output_len=growth.output_len,
        committed_len=growth.committed_len,
        allocated_len=growth.allocated_len,
        kv_runs=join_runs(record.kv_runs, growth.added_runs),
    )


def edited_kv(kv: KvState, edit: KvEdit) -> KvState:
    """`kv` as `edit` changed it (a new KvState). An edit that does not fit its runs (past a seq
    gap, which its reader reports already) is applied as sets: what it put back is free, what it
    took is not."""
    runs = edit_runs(kv.free_runs, edit.removed, edit.added)
    if runs is None:
        runs = edited_leniently(kv.free_runs, edit.removed, edit.added)
    return msgspec.structs.replace(kv, free_runs=runs)


def join_runs(head: Runs, tail: Runs) -> Runs:
    """`head` followed by `tail`, the first run of `tail` merged into the last of `head` when it
    continues it (as runs of the joined index list are)."""
    if head and tail and head[-1][0] + head[-1][1] == tail[0][0]:
        return [*head[:-1], (head[-1][0], head[-1][1] + tail[0][1]), *tail[1:]]
    return [*head, *tail]


def copy_state(state: CacheState) -> CacheState:
    """Shallow copy: records are immutable and apply_delta replaces them, never edits them, so
    only the dicts it edits in place are copied (all of them, whatever fields the schema grows)."""
    fields = msgspec.structs.asdict(state)
    return CacheState(**{name: dict(value) if isinstance(value, dict) else value for name, value in fields.items()})


def from_runs(runs: Runs) -> list[int]:
    return [start + i for start, length in runs for i in range(length)]


def pack_tokens(token_ids: list[int]) -> bytes:
    """Token ids as int32 in machine order: little-endian on every platform sglang serves on."""
    return array.array("i", token_ids).tobytes()


def unpack_tokens(packed: bytes) -> list[int]:
    return array.array("i", packed).tolist()


def key_hash(tokens: list[int]) -> int:
    """Stable 64-bit hash of a token sequence (same value on both ends, across runs)."""
    digest = hashlib.blake2b(array.array("q", tokens).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
