"""Capture: the cache state of one scheduler process at step boundaries, as full states and as
deltas whose cost scales with what changed.

`full_state(step)` reads everything: O(tree + mamba pool + KV free list + requests).
`step(step)` returns only what changed since the previous capture:

- nodes: the ids the hooks marked dirty (`EventSink.dirty_nodes`, see events.py) plus nodes
  created since (ids only grow and the core's arena is insertion-ordered, so new nodes are
  the arena's tail down to the largest id seen); depths come from the previous records;
- mamba slots: the slots that entered or left the allocator's free list (one read of it into a
  bitmap compared in numpy, O(pool)), the slots of changed nodes, and those whose request
  claims changed; a slot's claims depend on nothing else, so they are rebuilt for those slots
  only;
- requests: re-read every step (O(held requests)); a row's KV runs are re-read only from
  where the row grew, and a record that only decoding moved is sent as that growth;
- KV: re-read only if the allocator bound a new free list (O(free pages), vectorised).

On sglang's Rust tree core there are no node hooks: each step re-reads the request paths and
the tree-owned slots (O(paths + tree slots)); see adapter_0523 (the
readers come from the sglang generation's adapter: generations.py).

Consistency rule
----------------
Capture runs in the AFTER hook of `Scheduler.process_batch_result` (sglang 0.5.23), on the
scheduler thread, so no cache method is running. That point is outside admission groups:
`alloc_group_begin/end` bracket the admission loop inside `get_new_batch_prefill`, which
returns before the batch is run; and outside KV free groups, which
`process_batch_result_prefill/decode` open and close themselves. The state is one the
scheduler itself could see between two calls.

Without overlap scheduling (`event_loop_normal`) the loop is schedule -> run -> process: the
capture sees step k fully done. With overlap (`event_loop_overlap`) the loop is schedule
batch k -> launch its forward -> process the result of batch k-1 -> capture. So at capture:

- tree, locks, slot ownership, allocator free lists, `req.kv` (track indices, ping-pong
  slots, `kv_allocated_len`, `req_to_token` rows) already include the *scheduling* of batch k:
  its admissions and matches, its KV and slot allocations, the chunked request's
  `checkpoint_into_tree` (which donates a ping-pong slot), the decode track plan;
- output tokens, finished requests and their release are those of batch k-1;
- batch k's forward may still be running: the working, ping-pong and COW-destination slots
  of its requests are being written, and a slot donated to the tree while scheduling batch k
  may get its content from that forward. Slot *contents* (fingerprints) must be read only
  after it finishes; ownership may be read now.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mcinspect.schema import (
    SCHEMA_VERSION,
    CacheState,
    Counters,
    Delta,
    Event,
    KvEdit,
    KvState,
    NodeId,
    NodeRecord,
    RequestGrowth,
    RequestRecord,
    Rid,
    Seq,
    SlotClaim,
    SlotContent,
    SlotId,
    Step,
)

from . import gc_pause
from .adapter_0523 import UnsupportedCache, depth_of, node_end
from .catch_up import IMMEDIATE_NODES, Bulk, CatchUp
from .cow_map import CowMap
from .events import EventSink
from .generations import UNIFIED_TREE_CORE, Generation
from .pools_0523 import HeldRequest, TreeSlots, claims_for_slot
from .published_state import PublishedState
from .tensor_runs import host_concat, version_of

RETIRED_A_STEP = 8
"""Shards of a finished catch-up's published state freed a step (1024 entries each)."""


@dataclass
class DeltaParts:
    """What changed since the previous capture (the state part of a `Delta`)."""

    upsert_nodes: Sequence[NodeRecord]
    removed_nodes: Sequence[NodeId]
    """Tuples after a catch-up (capture.step), lists otherwise: either encodes as the schema's list."""
    slots: dict[SlotId, tuple[SlotClaim, ...]]
    """Changed slots with their full new claim list."""
    upsert_requests: list[RequestRecord]
    removed_requests: list[Rid]
    kv: KvState | None
    """The allocator state if it changed, else None."""
    grown_requests: list[RequestGrowth] = field(default_factory=list)
    kv_edit: KvEdit | None = None
    """The allocator's change as an edit of the last state sent, when `kv` is None."""

    def is_empty(self) -> bool:
        parts = (self.upsert_nodes, self.removed_nodes, self.slots, self.upsert_requests, self.removed_requests, self.grown_requests)
        return not any(parts) and self.kv is None and self.kv_edit is None

    def to_delta(
        self,
        *,
        seq: Seq,
        step: Step,
        events: list[Event],
        counters: Counters,
        contents: dict[SlotId, SlotContent] | None = None,
        removed_contents: list[SlotId] | None = None,
    ) -> Delta:
        """The Delta of these parts, with the step's slot fingerprints (contents.py) if given."""
        return Delta(
            schema_version=SCHEMA_VERSION,
            seq=seq,
            step=step,
            upsert_nodes=self.upsert_nodes,  # type: ignore[arg-type]  # see upsert_nodes
            removed_nodes=self.removed_nodes,  # type: ignore[arg-type]
            slots=self.slots,
            upsert_requests=self.upsert_requests,
            removed_requests=self.removed_requests,
            kv=self.kv,
            events=events,
            counters=counters,
            contents=contents if contents is not None else {},
            removed_contents=removed_contents if removed_contents is not None else [],
            grown_requests=self.grown_requests,
            kv_edit=self.kv_edit,
        )


class Capture:
    """Full states and deltas of one scheduler's cache. Scheduler thread only.

    `scheduler` is sglang's Scheduler (or anything with the attributes `generation.pools` reads);
    `sink` must receive the hooks of `events.hook_points` for `step` to see node and slot
    changes, and serves this Capture alone (`full_state` restarts its dirty marks). The first
    `full_state` sets the baseline; `step` moves it forward.
    """

    def __init__(
        self, scheduler: Any, sink: EventSink, generation: Generation = UNIFIED_TREE_CORE, *, budget_s: float | None = None
    ) -> None:
        """`budget_s`: spread a capture that must read many nodes over steps, this much time a
        step (catch_up.py; `step` returns None until it is done); None reads all at once."""
        tree_cache = scheduler.tree_cache
        refusal = generation.refusal(tree_cache)
        if refusal:
            raise UnsupportedCache(f"the {generation.name} adapter cannot read this cache: {refusal}")
        self.scheduler = scheduler
        self.sink = sink
        self.tree_cache = tree_cache
        self.pool = scheduler.req_to_token_pool
        self._pools = pools = generation.pools
        self._view: Any = generation.tree_view(tree_cache, sink)
        """A generations.TreeView: FullTreeView when `full_detail`, else PathTreeView."""
        self._request_reader = pools.RequestReader(self.pool)
        self._kv_reader = pools.KvReader(scheduler.token_to_kv_pool_allocator)
        self._nodes: CowMap[NodeId, NodeRecord] = CowMap()
        self._slots: CowMap[SlotId, tuple[SlotClaim, ...]] = CowMap()
        """The baseline's records, which `published()` hands to the request thread (cow_map.py)."""
        self._requests: dict[Rid, RequestRecord] = {}
        self._kv: KvState | None = None
        self._tree_slots: TreeSlots = {}
        self._tree_flat = torch.zeros(0, dtype=torch.int64)
        """Rust core: every tree-owned slot as of the last capture, shown or not. (The Python
        core shows every node, so `_tree_slots` is the whole truth there.)"""
        self._req_claims: dict[SlotId, list[SlotClaim]] = {}
        self._free = np.zeros(0, dtype=bool)
        """The allocator's free slots as of the last capture, as a bitmap (index: slot id): one
        vectorised compare finds what moved, where sets of a 100k-slot pool took ms a step."""
        self._free_source: tuple[Any, int | bytes | None] | None = None
        """The free list `_free` was read from, and its version or values (`_read_free`)."""
        self.free_list_reads = 0
        """Reads of a free list that had moved (`_read_free`): the pool's occupancy moves only then."""
        self._admission: set[int] = set()
        self._arena: dict[int, Any] | None = None
        self._max_node_id = -1
        self._step = Step(0)
        self._budget_s = budget_s
        self._catch_up: CatchUp | None = None
        self._owners: dict[SlotId, NodeId] = {}
        self.owner_changes: set[int] = set()
        """Slots whose tree owner (`tree_owners`) changed at the last capture: a new set each
        capture, which the capture no longer uses (ContentCapture keeps it)."""
        self._retired: list[dict[Any, Any]] = []
        """Shards of a finished catch-up's published state, freed RETIRED_A_STEP a step."""

    @property
    def full_detail(self) -> bool:
        """False on the Rust tree core: only nodes on request paths are visible."""
        return self._view.full_detail

    def slot_of(self, node_id: int) -> int | None:
        """The mamba slot a node holds in the tree now (read from sglang, not the baseline)."""
        return self._view.slot_of(node_id)

    def path_tokens(self, node_id: int) -> list[int] | None:
        """A node's prefix tokens from the tree (Python core), else None."""
        return self._view.path_tokens(node_id)

    def state_nodes(self) -> list[int]:
        """Every node holding a mamba state that the tree core shows (none on the Rust core)."""
        return self._view.state_nodes()

    @property
    def size(self) -> int:
        """Mamba pool slots (1..size)."""
        return self._pools.mamba_pool_size(self.pool)

    def tree_owners(self) -> dict[SlotId, NodeId]:
        """Tree-owned slot -> its node, as of the last capture: -1 for a node the Rust core does
        not show, the lowest id where several nodes claim one slot. Kept up to date at each
        capture, where `owner_changes` says which slots it changed; the caller must not change it."""
        return self._owners

    @property
    def catching_up(self) -> bool:
        """A capture spread over steps is under way: call `step` at every step until it is done."""
        return self._catch_up is not None

    def _move_owners(self, slots: Iterable[int]) -> set[int]:
        """Bring `_owners` up to date for `slots` (their tree ownership may have moved); returns
        those whose owner changed."""
        flat = set(self._tree_flat.tolist()) if self._tree_flat.numel() else ()
        owners = self._owners
        changed = set()
        for slot in slots:
            sid = SlotId(slot)
            nodes = self._tree_slots.get(sid)
            owner = min(nodes) if nodes else NodeId(-1) if slot in flat else None
            if owners.get(sid) != owner:
                changed.add(slot)
                if owner is None:
                    del owners[sid]
                else:
                    owners[sid] = owner
        return changed

    def full_state(self, step: Step, batch: Any = None) -> CacheState:
        """Everything, read afresh; becomes the baseline for the next `step`."""
        with gc_pause.paused():  # a few objects per node: no collection walks the heap meanwhile
            return self._full_state(step, batch)

    def _full_state(self, step: Step, batch: Any) -> CacheState:
        self.sink.start_tracking()
        held = self._pools.held_requests(self.scheduler, batch)
        if self._view.full_detail:
            self._arena = self._view.arena()
            self._max_node_id = max(self._arena, default=-1)
            self._nodes = CowMap(self._view.all_records(self.sink.tombstones))
            self._tree_slots = _index(self._nodes.values())
        else:
            self._nodes = CowMap(self._view.path_records(_anchors(held)))
            self._tree_slots = _index(self._nodes.values())
            self._tree_flat = self._view.tree_slots()
        self._requests, self._req_claims, *_ = self._request_reader.read(held, self._pools.session_kv(self.tree_cache))
        self._admission = set(self.sink.admission_slots())
        self._free = free = self._read_free()
        is_free = free.tolist()
        in_tree = set(self._tree_flat.tolist())
        self._slots = CowMap((SlotId(slot), self._claims(slot, is_free[slot], slot in in_tree)) for slot in range(1, self.size + 1))
        self._kv = self._kv_reader.read()
        self._step = step
        self._catch_up = None
        self.owner_changes = self._move_owners(set(self._owners) | set(self._tree_slots) | set(self._tree_flat.tolist()))
        return self.state

    @property
    def state(self) -> CacheState:
        """The state as of the last published capture (a new CacheState; the records are
        shared): the baseline, or while a catch-up is under way the state before it."""
        assert self._kv is not None, "full_state() first"
        if self._catch_up is not None:
            return self._catch_up.published.to_cache_state()
        return CacheState(
            step=self._step,
            nodes=self._nodes.to_dict(),
            slots=self._slots.to_dict(),  # type: ignore[arg-type]  # tuples encode as the schema's lists
            requests=dict(self._requests),
            kv=self._kv,
        )

    def published(self) -> PublishedState:
        """`state` in O(shards), for another thread to encode (published_state.py)."""
        assert self._kv is not None, "full_state() first"
        if self._catch_up is not None:
            return self._catch_up.published
        return PublishedState(self._step, self._nodes.freeze(), self._slots.freeze(), self._requests, self._kv)

    def step(self, step: Step, batch: Any = None) -> DeltaParts | None:
        """What changed since the previous capture; moves the baseline to now. None while a
        catch-up spread over steps is under way (nothing to publish yet; see catch_up.py)."""
        assert self._kv is not None, "full_state() first"
        del self._retired[-RETIRED_A_STEP:]
        held = self._pools.held_requests(self.scheduler, batch)
        resync = self.sink.overflowed  # too many marks piled up: re-read all, then diff
        if resync:
            self.sink.start_tracking()
            self._arena = None
        catch_up = None
        if self._view.full_detail:
            marks, tail, everything = self._marked_nodes()
            catch_up = self._catch_up
            # A small tree is read at once even when every node is to be read (a `reset()`):
            # spread, a step whose reads took over half the budget left its events unpublished.
            # A walked tree is read whole at every capture, however big: with no marks, a read
            # spread over steps would begin again at each (nothing says what moved meanwhile).
            many = len(marks) + len(tail) + (len(self._nodes) if everything else 0) > IMMEDIATE_NODES
            if catch_up is None and self._budget_s is not None and (resync or many) and not self._view.walked:
                catch_up = self._catch_up = CatchUp(self.published())
            if catch_up is None:
                todo = marks.union(tail, self._nodes if everything else ())
                upserts, removed = self._read_nodes(todo, set())
                changed_slots = self._apply_nodes(upserts, removed)
            else:
                # After an overflow every baseline node may be gone: its frozen shards are gone
                # through a shard at a time (freezing is O(shards); a list of its ids was ms).
                catch_up.mark(marks, tail, everything, self._nodes.freeze().shards() if everything else [])
                if resync:
                    catch_up.slot_sweep = Bulk(range(1, self.size + 1))
                free = self._read_free()  # the free list moves step by step too: a tree filling up takes every slot
                moved = self._free_moved(free)
                if len(moved) > IMMEDIATE_NODES:  # rebuilt a chunk at a time, as the tree's
                    catch_up.slot_sweep.add(moved)
                else:
                    catch_up.slots.update(moved.tolist())
                self._free = free
                if not self._advance(catch_up):
                    self._kv_reader.read_over_steps()  # the publishing step then edits a short change
                    return None
                self._catch_up = None
                # The state it published is dropped with it: every shard the baseline copied
                # since, the old records and claims in them (100k tuples after a tree filled up
                # unwatched) would be freed in this step, ms of it. Freed a few a step instead.
                self._retired += catch_up.published.nodes.shards() + catch_up.published.slots.shards()
                # Tuples: of untracked records and ints, the cyclic GC stops tracking them at their
                # first collection. A list of 100k records was walked by every young collection
                # until the publisher had encoded it (gen-1 pauses of 7.5 ms).
                upserts, removed = tuple(catch_up.upserts.values()), tuple(catch_up.removed)
                changed_slots = set()
        else:
            upserts, removed = self._rust_nodes(held)
            changed_slots = self._apply_nodes(upserts, removed)
        owner_changes = self._move_owners(changed_slots) if catch_up is None else catch_up.owner_changes
        upsert_requests, grown_requests, removed_requests, claims_moved = self._apply_requests(held)
        changed_slots |= claims_moved

        admission = set(self.sink.admission_slots())
        changed_slots |= admission ^ self._admission
        self._admission = admission
        if catch_up is None:  # a catch-up read the free list above: it cannot move within the step
            free = self._read_free()
            if free is not self._free:  # most decode steps: the same list, the same bitmap
                changed_slots.update(self._free_moved(free).tolist())
                self._free = free
        if resync and catch_up is None:
            changed_slots |= set(range(1, self.size + 1))

        slots = self._reclaim(changed_slots, free) if changed_slots else {}
        if catch_up is not None:  # this step's claims over the catch-up's: no copy of its (maybe every) slots
            catch_up.claims.update(slots)
            slots = catch_up.claims
        kv, kv_edit = self._read_kv()
        self._step = step
        self.owner_changes = owner_changes
        return DeltaParts(upserts, removed, slots, upsert_requests, removed_requests, kv, grown_requests, kv_edit)

    def _read_kv(self) -> tuple[KvState | None, KvEdit | None]:
        """The allocator's change since the last capture: as an edit of the state published last
        when the reader edited that (a fragmented pool's whole runs were 414 KB a step at 62k
        runs: tests/bench/bench_kv_free_list.py), else the whole state if it differs; (None,
        None) if nothing changed."""
        if not self._kv_reader.changed():
            return None, None
        base = self._kv
        self._kv = now = self._kv_reader.read()
        edit = self._kv_reader.edit_since(base)
        if edit is not None:
            return None, edit if edit.removed or edit.added else None
        return (now, None) if now != base else (None, None)

    def _advance(self, catch_up: CatchUp) -> bool:
        """Read the catch-up's nodes, then rebuild its slots, in chunks while the next would end
        within the step's budget (at least one chunk of each a step, so both finish while the
        tree changes; the node reads leave room for that slot chunk); True when nothing is left
        (the step then publishes it all), unless the reads took more than half the budget: then
        the next step publishes (once; CatchUp.publish_next)."""
        assert self._budget_s is not None
        deadline = time.perf_counter() + self._budget_s
        catch_up.steps += 1
        arena = self._arena
        assert arena is not None  # this step's _marked_nodes read it
        # Stopping only once past the deadline ran a step's catch-up to 1.3-2x its budget at
        # 100k nodes: the last node chunk and the slot chunk after it each began in time.
        while (chunk := catch_up.next_nodes(arena)) is not None:
            began = time.perf_counter()
            upserts, removed = self._read_nodes(chunk, catch_up.todo)
            if catch_up.stale_depths:
                catch_up.fresh.update(chunk)
            catch_up.read(upserts, removed)
            moved = self._apply_nodes(upserts, removed)
            catch_up.slots |= moved
            catch_up.owner_changes |= self._move_owners(moved)
            now = time.perf_counter()
            if now + (now - began) + catch_up.slot_chunk_s >= deadline:
                break
        while (slots := catch_up.next_slots()) is not None:
            began = time.perf_counter()
            catch_up.claims.update(self._reclaim(slots, self._free))  # the baseline's inputs: see catch_up.py
            now = time.perf_counter()
            catch_up.slot_chunk_s = now - began
            if now + catch_up.slot_chunk_s >= deadline:
                break
        if catch_up.done and not catch_up.publish_next and time.perf_counter() >= deadline - self._budget_s / 2:
            catch_up.publish_next = True  # reads and publishing in one step made the worst step (catch_up.py)
            return False
        return catch_up.done

    def _apply_requests(self, held: dict[Rid, HeldRequest]) -> tuple[list[RequestRecord], list[RequestGrowth], list[Rid], set[int]]:
        """Move the request baseline: (upserts, growths, removed, slots whose request claims changed)."""
        records, self._req_claims, moved, upserts, grown = self._request_reader.read(held, self._pools.session_kv(self.tree_cache))
        old = self._requests
        removed = [rid for rid in old if rid not in records]
        self._requests = records
        return upserts, grown, removed, moved

    # --- nodes ---

    def _marked_nodes(self) -> tuple[set[int], list[int] | range, bool]:
        """Python core: the nodes to read for this step: (marked by the hooks, created since (the
        arena's tail), everything): with everything (the arena was replaced by `reset()` or a mark
        overflow) the tail is the whole arena, and every baseline node may be gone too."""
        arena = self._view.arena()
        marks = self.sink.take_dirty_nodes()
        newest = next(reversed(arena), -1)  # the newest is the largest
        if arena is not self._arena:
            self._arena, self._max_node_id = arena, max(self._max_node_id, newest)
            oldest = next(iter(arena), 0)
            # The ids counted up since the oldest, when the arena holds most of them: O(1), where a
            # list of the arena is ms at 100k (the ids in the range it lacks are skipped when read).
            every = range(oldest, newest + 1) if newest + 1 - oldest <= 2 * len(arena) else list(arena)
            return marks, every, True
        tail: list[int] | range = []
        for count, node_id in enumerate(reversed(arena)):
            if node_id <= self._max_node_id:
                break
            if count == IMMEDIATE_NODES:
                # A tree grown unwatched: its new ids are all above the last seen (sglang counts
                # them up), so the tail is a range, O(1) where a list of the arena was ms; the
                # ids in it no longer (or never) in this arena are skipped when read.
                tail = range(self._max_node_id + 1, newest + 1)
                break
            tail.append(node_id)
        self._max_node_id = max(self._max_node_id, newest)
        return marks, tail, False

    def _read_nodes(self, chunk: Iterable[int], pending: set[int]) -> tuple[list[NodeRecord], list[NodeId]]:
        """Records of `chunk`'s nodes that differ from the baseline, and those of them that left
        the tree; `pending`: nodes still to read after these (their baseline depth may be stale)."""
        ids = set(chunk)
        if not ids:  # most decode steps: no node changed
            return [], []
        view = self._view
        catch_up = self._catch_up
        arena = self._arena  # this step's (a walked tree's would be walked again: O(tree) a chunk)
        assert arena is not None
        removed = [NodeId(n) for n in ids if n not in arena and n in self._nodes]
        alive = [arena[n] for n in ids if n in arena]
        memo: dict[int, int] = {}
        baseline = self._nodes

        def known(node_id: int) -> int | None:
            record = baseline.get(NodeId(node_id))
            if record is None or node_id in ids or node_id in pending:
                return None
            return record.depth if catch_up is None or catch_up.trusted_depth(node_id) else None

        items = [(node, depth_of(node, known, memo)) for node in alive]
        # A catch-up reads each node once: remembered, its fields would only churn the memo.
        records = view.records(items, self.sink.tombstones, once=catch_up is not None)
        return [r for r in records if baseline.get(r.id) != r], removed

    def _rust_nodes(self, held: dict[Rid, HeldRequest]) -> tuple[list[NodeRecord], list[NodeId]]:
        view = self._view
        now = view.path_records(_anchors(held))
        upserts = [r for node_id, r in now.items() if self._nodes.get(node_id) != r]
        removed = [node_id for node_id in self._nodes if node_id not in now]
        return upserts, removed

    def _apply_nodes(self, upserts: list[NodeRecord], removed: list[NodeId]) -> set[int]:
        """Move the node baseline and the index of visible tree slots; returns the slots whose
        tree ownership may have moved."""
        changed: set[int] = set()
        for node_id in removed:
            changed |= _unindex(self._tree_slots, self._nodes.pop(node_id))
        for record in upserts:
            old = self._nodes.get(record.id)
            if old is not None:
                changed |= _unindex(self._tree_slots, old)
            self._nodes[record.id] = record
            changed |= _add(self._tree_slots, record)
        if not self._view.full_detail:  # slots held by nodes the core does not show
            now = self._view.tree_slots()
            moved = torch.cat((now[~torch.isin(now, self._tree_flat)], self._tree_flat[~torch.isin(self._tree_flat, now)]))
            changed |= set(moved.tolist())
            self._tree_flat = now
        return changed

    # --- slots ---

    def _claims(self, slot: int, free: bool, in_tree: bool) -> tuple[SlotClaim, ...]:
        """`in_tree`: some node holds the slot, maybe one the Rust core does not show."""
        sid = SlotId(slot)
        owners = self._tree_slots.get(sid)
        if owners is None and in_tree:
            owners = {NodeId(-1): -1}
        return claims_for_slot(sid, free, owners, self._req_claims.get(sid, []), slot in self._admission)

    def _read_free(self) -> np.ndarray:
        """The mamba allocator's free slots now, as a bitmap over 0..size (one device copy); the
        last bitmap itself while the allocator holds the list it was read from, unchanged.

        sglang binds a new free list at each alloc and free (a slice or a cat), so a step with
        neither (most decode steps) finds the same tensor unchanged: at the same version, or,
        for an inference-mode tensor (which keeps no version: the scheduler's loop runs in
        inference mode), on the host, holding the values read last (a compare, not a read)."""
        listed = self._pools.free_mamba_slots(self.pool)
        seen = self._free_source
        if seen is not None and seen[0] is listed and _unchanged(listed, seen[1]):
            return self._free
        self.free_list_reads += 1
        size = self.size
        slots, _ = host_concat([listed])
        free = np.zeros(size + 1, dtype=bool)
        free[slots[(slots >= 0) & (slots <= size)]] = True
        self._free_source = (listed, _mark(listed))
        return free

    def _free_moved(self, free: np.ndarray) -> np.ndarray:
        """Slots that entered or left the free list since the last capture."""
        if free is self._free:
            return np.zeros(0, dtype=np.int64)
        if len(free) != len(self._free):  # the first step after full_state of an empty bitmap
            return np.arange(1, len(free))
        return np.flatnonzero(free != self._free)

    def _reclaim(self, slots: Iterable[int], free: np.ndarray) -> dict[SlotId, tuple[SlotClaim, ...]]:
        """New claim lists for `slots` (within 1..size) that differ from the baseline."""
        size = self.size
        wanted = sorted(s for s in slots if 1 <= s <= size)
        if not wanted:
            return {}
        is_free = free[wanted].tolist()
        in_tree = [False] * len(wanted)
        if self._tree_flat.numel():  # the Rust core's tree slots (always empty on the Python core)
            in_tree = torch.isin(torch.tensor(wanted, dtype=self._tree_flat.dtype), self._tree_flat).tolist()
        out = {}
        for slot, slot_free, slot_in_tree in zip(wanted, is_free, in_tree):
            claims = self._claims(slot, slot_free, slot_in_tree)
            if claims != self._slots.get(SlotId(slot)):
                self._slots[SlotId(slot)] = claims
                out[SlotId(slot)] = claims
        return out


def _mark(listed: Any) -> int | bytes | None:
    """What tells a later look that `listed` still holds what it holds now: its version; for
    an inference tensor on the host, its bytes (None: it will be read again)."""
    version = version_of(listed)
    if version is not None or not isinstance(listed, torch.Tensor) or not listed.is_cpu:
        return version
    return listed.numpy().tobytes()


def _unchanged(listed: Any, mark: int | bytes | None) -> bool:
    """`listed` (the object `mark` was taken of) holds what it held then."""
    if mark is None:
        return False
    if isinstance(mark, bytes):  # a memcmp: a third of np.array_equal's time on a short list
        return listed.numpy().tobytes() == mark
    return version_of(listed) == mark


def _anchors(held: dict[Rid, HeldRequest]) -> list[tuple[int, Any]]:
    """(locked node, token ids) of each request holding a tree lock (Rust core paths)."""
    out = []
    for h in held.values():
        lock = h.req.lock
        if lock is not None:
            out.append((lock.node, h.req.origin_input_ids + h.req.output_ids))
    return out


def _index(records: Any) -> TreeSlots:
    index: TreeSlots = {}
    for record in records:
        _add(index, record)
    return index


def _add(index: TreeSlots, record: NodeRecord) -> set[int]:
    if record.mamba_slot < 0:
        return set()
    index.setdefault(record.mamba_slot, {})[record.id] = node_end(record)
    return {record.mamba_slot}


def _unindex(index: TreeSlots, record: NodeRecord) -> set[int]:
    owners = index.get(record.mamba_slot)
    if owners is None or record.id not in owners:
        return set()
    del owners[record.id]
    if not owners:
        del index[record.mamba_slot]
    return {record.mamba_slot}
