"""A capture spread over steps (catch_up.py) against sglang 0.5.23's real cache classes on CPU
tensors: the tree changes between the chunks, and the one delta at the end still takes the last
published state to exactly what a full read sees; no step reads more than its share; snapshots
meanwhile serve the last published state."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import gc  # noqa: E402
import random  # noqa: E402
from array import array  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
from cache_driver import Driver  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, MatchPrefixParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from mcinspect.schema import CacheState, Counters, Seq, Step, apply_delta  # noqa: E402
from mcinspect_engine_hooks import adapter_0516, tree_walk  # noqa: E402
from mcinspect_engine_hooks import capture as capture_module  # noqa: E402
from mcinspect_engine_hooks.capture import RETIRED_A_STEP, Capture  # noqa: E402
from mcinspect_engine_hooks.catch_up import IMMEDIATE_NODES, NODE_CHUNK, SLOT_CHUNK  # noqa: E402
from mcinspect_engine_hooks.events import EventSink  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402

import cpu_cache  # noqa: E402

GROUPS, PER_GROUP = 12, 40


@pytest.fixture
def hooks() -> Iterator[tuple[EventSink, ErrorCounter]]:
    with cpu_cache.mcinspect_hooks() as pair:
        yield pair


class Tree:
    """A branching tree built through sglang's own insert / match / lock / evict."""

    def __init__(self) -> None:
        self.scheduler = cpu_cache.build_cache(mamba_slots=GROUPS * PER_GROUP * 2 + 200, kv_size=16_384)
        self.drive = Driver(self.scheduler)
        self.keys: list[list[int]] = []
        self.rng = random.Random(0)

    def insert(self) -> None:
        group = self.rng.randrange(GROUPS)
        key = [1000 + group, 2000 + group, 3000 + self.rng.randrange(3), 4000 + len(self.keys), 5000 + len(self.keys)]
        self.drive.insert(key)
        self.keys.append(key)

    def change(self) -> None:
        """A step's worth: inserts (some split nodes), matches, a lock / unlock, an eviction."""
        tree = self.scheduler.tree_cache
        for _ in range(3):
            self.insert()
        node = tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", self.rng.choice(self.keys))))).last_device_node
        tree.unlock(tree.lock(node))
        tree.evict(EvictParams(num_tokens=0, mamba_num=1))
        tree.evict(EvictParams(num_tokens=5))


def full_read(scheduler: SimpleNamespace, sink: EventSink, step: int) -> CacheState:
    return Capture(scheduler, sink).full_state(Step(step))


def spy(capture: Capture) -> tuple[list[int], list[int], list[bool]]:
    """Nodes read per `records` call, slots rebuilt per `_reclaim` call, and whether each
    `records` call read its nodes `once` (not remembered)."""
    nodes: list[int] = []
    slots: list[int] = []
    onces: list[bool] = []
    records, reclaim = capture._view.records, capture._reclaim

    def counted_records(items, tombstones, *, once=False):  # noqa: ANN001, ANN202
        nodes.append(len(items))
        onces.append(once)
        return records(items, tombstones, once=once)

    def counted_reclaim(wanted, free):  # noqa: ANN001, ANN202
        slots.append(len(wanted))
        return reclaim(wanted, free)

    capture._view.records = counted_records
    capture._reclaim = counted_reclaim
    return nodes, slots, onces


def catch_up(tree: Tree, capture: Capture, published: CacheState) -> tuple[CacheState, int]:
    """Step until the catch-up publishes, changing the tree between steps; returns the state
    the published delta leads to and the step it came at."""
    before = capture.state
    n = 1
    while True:
        parts = capture.step(Step(n))
        if parts is not None:
            gc.collect()  # its node lists hold untracked records and ids: the GC stops tracking them
            assert not gc.is_tracked(parts.upsert_nodes) and not gc.is_tracked(parts.removed_nodes)
            apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
            return published, n
        assert capture.catching_up and capture.state == before  # snapshots serve the last published state
        assert n < 1_000, "the catch-up never ends"
        tree.change()
        n += 1


def grown_unwatched(sink: EventSink) -> tuple[Tree, Capture, CacheState]:
    """An empty tree captured whole, then grown by every group with nobody watching, by a
    capture that reads one chunk of nodes and one of slots a step."""
    tree = Tree()
    capture = Capture(tree.scheduler, sink, budget_s=0.0)
    published = capture.full_state(Step(0))
    for _ in range(GROUPS * PER_GROUP):
        tree.insert()
    return tree, capture, published


def test_the_kv_free_list_read_over_the_catch_ups_steps_is_published(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """The growth moved the KV free list: it is read whole over the catch-up's first steps
    (KvReader.read_over_steps), not in the step that publishes; with nothing changed since,
    that step still publishes it."""
    sink, _ = hooks
    tree, capture, published = grown_unwatched(sink)
    n, parts = 0, None
    while parts is None:
        n += 1
        whole_reads = capture._kv_reader.whole_reads
        parts = capture.step(Step(n))
    assert n > 3 and capture._kv_reader.whole_reads == whole_reads == 2  # the first, and one over steps, not in the last
    assert parts.kv is not None and parts.kv_edit is None  # edited from what was read over steps: sent whole
    apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
    assert published == full_read(tree.scheduler, sink, n)


def test_a_tree_grown_unwatched_is_caught_up_in_chunks_while_it_changes(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, errors = hooks
    tree, capture, published = grown_unwatched(sink)
    assert len(tree.scheduler.tree_cache.tree_core._node_arena) > IMMEDIATE_NODES
    nodes, slots, onces = spy(capture)
    state, n = catch_up(tree, capture, published)
    assert n > 5  # it was spread over steps
    assert max(nodes) <= NODE_CHUNK and max(slots) <= SLOT_CHUNK
    assert all(onces)  # a catch-up's reads are not remembered
    assert state == full_read(tree.scheduler, sink, n)
    owners = {r.mamba_slot: r.id for r in state.nodes.values() if r.mamba_slot >= 0}
    assert capture.tree_owners() == owners
    assert capture.owner_changes >= set(owners)  # every slot the tree took since the last capture
    # the next steps are ordinary again
    tree.change()
    parts = capture.step(Step(n + 1))
    assert parts is not None and not capture.catching_up
    assert not onces[-1]  # an ordinary step's are
    apply_delta(state, parts.to_delta(seq=Seq(n + 1), step=Step(n + 1), events=[], counters=Counters()))
    assert state == full_read(tree.scheduler, sink, n + 1)
    assert errors.total == 0


class Clock:
    """A perf_counter that only the spied chunks move: a node chunk takes 2 ms, a slot chunk 1 ms."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_no_chunk_begins_that_would_end_past_the_steps_budget(
    hooks: tuple[EventSink, ErrorCounter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping once past the deadline let the last node chunk and the slot chunk after it each
    begin in time: a 7 ms budget ran to 9 ms (4 node chunks, then a slot chunk)."""
    sink, errors = hooks
    tree, capture, published = grown_unwatched(sink)
    capture._budget_s = 0.007
    clock = Clock()
    monkeypatch.setattr(capture_module, "time", clock)
    read_nodes, reclaim, advance = capture._read_nodes, capture._reclaim, capture._advance
    spent: list[float] = []

    def timed_read_nodes(chunk, pending):  # noqa: ANN001, ANN202
        clock.now += 0.002
        return read_nodes(chunk, pending)

    def timed_reclaim(slots, free):  # noqa: ANN001, ANN202
        clock.now += 0.001
        return reclaim(slots, free)

    def timed_advance(catch_up):  # noqa: ANN001, ANN202
        began = clock.now
        try:
            return advance(catch_up)
        finally:
            spent.append(clock.now - began)

    capture._read_nodes, capture._reclaim, capture._advance = timed_read_nodes, timed_reclaim, timed_advance
    state, n = catch_up(tree, capture, published)
    assert n > 2 and max(spent) <= 0.007 + 1e-9
    assert state == full_read(tree.scheduler, sink, n)
    assert errors.total == 0


def test_a_mark_overflow_rereads_everything_in_chunks(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, errors = hooks
    tree, capture, published = grown_tree(sink)
    tree.change()
    max_dirty, sink.max_dirty = sink.max_dirty, 0
    tree.change()  # more marks than the sink keeps: they are dropped, Capture must re-read all
    sink.max_dirty = max_dirty
    assert sink.overflowed
    nodes, slots, _ = spy(capture)
    state, n = catch_up(tree, capture, published)
    assert max(nodes) <= NODE_CHUNK and max(slots) <= SLOT_CHUNK
    assert sum(nodes) >= len(published.nodes) and sum(slots) >= len(published.slots)  # everything was read again
    assert state == full_read(tree.scheduler, sink, n)
    assert errors.total == 0


def test_reads_that_filled_a_step_leave_the_publishing_to_the_next_step(hooks: tuple[EventSink, ErrorCounter]) -> None:
    sink, errors = hooks
    tree, capture, published = grown_unwatched(sink)  # a budget of 0: every step's reads fill it
    n, deferred_at = 1, None
    while (parts := capture.step(Step(n))) is None:
        if deferred_at is None and capture._catch_up is not None and capture._catch_up.publish_next:
            deferred_at = n
            assert capture._catch_up.done  # everything was read: only the publishing was left
        tree.change()
        n += 1
    assert deferred_at == n - 1  # once, then the next step published
    apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
    assert published == full_read(tree.scheduler, sink, n)
    assert errors.total == 0


@pytest.mark.parametrize("budget_s", [None, 60.0], ids=["no budget", "reads left most of the budget"])
def test_a_step_whose_reads_fit_publishes_everything_at_once(hooks: tuple[EventSink, ErrorCounter], budget_s: float | None) -> None:
    """Without a budget a step reads everything; with one its reads left mostly unspent, the
    same step publishes (only reads that filled half of it leave that to the next step)."""
    sink, _ = hooks
    tree = Tree()
    capture = Capture(tree.scheduler, sink, budget_s=budget_s)
    published = capture.full_state(Step(0))
    for _ in range(GROUPS * PER_GROUP):
        tree.insert()
    parts = capture.step(Step(1))
    assert parts is not None
    apply_delta(published, parts.to_delta(seq=Seq(1), step=Step(1), events=[], counters=Counters()))
    assert published == full_read(tree.scheduler, sink, 1)


def test_a_small_tree_read_whole_is_read_at_once(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """After a `reset()` (as on the releases whose tree is walked afresh each capture) every node
    is to be read: with few nodes, the same step reads and publishes them, whatever the budget
    (spread, a step whose reads took over half of it published nothing: its events were lost)."""
    sink, _ = hooks
    tree = Tree()
    for _ in range(20):
        tree.insert()
    capture = Capture(tree.scheduler, sink, budget_s=1e-9)
    published = capture.full_state(Step(0))
    tree.scheduler.tree_cache.reset()
    for _ in range(10):
        tree.insert()
    parts = capture.step(Step(1))
    assert parts is not None and not capture.catching_up and parts.removed_nodes
    apply_delta(published, parts.to_delta(seq=Seq(1), step=Step(1), events=[], counters=Counters()))
    assert published == full_read(tree.scheduler, sink, 1)


def test_a_walked_tree_of_many_nodes_is_read_whole_once_a_step(
    hooks: tuple[EventSink, ErrorCounter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the releases whose tree is walked afresh at each capture (MambaRadixCache and 0.5.16
    without their dirty-mark hooks: no arena, no marks) every node is to be read at every capture, and nothing says which of
    them moved since: a read spread over steps began again at every step and never published.
    Each capture reads the whole tree in its own step, from one walk, whatever the budget."""
    sink, errors = hooks
    tree = Tree()
    capture = Capture(tree.scheduler, sink, budget_s=1e-9)
    capture._view = adapter_0516.CacheTreeView(tree.scheduler.tree_cache.tree_core)  # 0.5.16's view without marks, over this core
    published = capture.full_state(Step(0))
    for _ in range(GROUPS * PER_GROUP):
        tree.insert()
    assert len(tree.scheduler.tree_cache.tree_core._node_arena) > 2 * IMMEDIATE_NODES
    walks = []
    walk = tree_walk.walked_arena
    monkeypatch.setattr(tree_walk, "walked_arena", lambda root: walks.append(1) or walk(root))
    for n in range(1, 6):
        walks.clear()
        parts = capture.step(Step(n))
        assert parts is not None and not capture.catching_up
        assert len(walks) == 1
        apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
        assert published == full_read(tree.scheduler, sink, n)
        tree.change()
    assert errors.total == 0


def test_the_caught_up_baseline_leaves_nothing_for_the_cyclic_gc(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """KV runs and claim lists are tuples, which a collection stops tracking: as lists, a
    100k-node catch-up kept 200k tracked objects alive and set off full collections over the
    engine's whole heap (seconds on the scheduler thread)."""
    sink, _ = hooks
    tree, capture, published = grown_unwatched(sink)
    catch_up(tree, capture, published)
    gc.collect()  # a tuple of tuples needs two passes
    gc.collect()
    state = capture.state
    held = [record.kv_runs for record in state.nodes.values()] + list(state.slots.values())
    assert len(held) > GROUPS * PER_GROUP and not [container for container in held if gc.is_tracked(container)]


def grown_tree(sink: EventSink) -> tuple[Tree, Capture, CacheState]:
    """A tree of every group, captured whole, by a capture that reads one chunk of nodes and
    one of slots a step."""
    tree = Tree()
    for _ in range(GROUPS * PER_GROUP):
        tree.insert()
    capture = Capture(tree.scheduler, sink, budget_s=0.0)
    return tree, capture, capture.full_state(Step(0))


def overflowed_tree(sink: EventSink) -> tuple[Tree, Capture, CacheState]:
    """A grown tree whose next step's marks overflow (splits and evictions among the dropped)."""
    tree, capture, published = grown_tree(sink)
    max_dirty, sink.max_dirty = sink.max_dirty, 0
    tree.change()
    sink.max_dirty = max_dirty
    assert sink.overflowed
    return tree, capture, published


def test_no_step_of_a_catch_up_after_an_overflow_reads_more_than_a_chunk(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """The O(tree) parts (every node, every baseline node's removal, every slot) are bulk work
    read a chunk a step like the rest: none is done in the step that starts or ends the catch-up."""
    sink, errors = hooks
    tree, capture, published = overflowed_tree(sink)
    nodes, slots, _ = spy(capture)
    per_step: list[tuple[int, int]] = []
    n = 0
    while True:
        n += 1
        nodes.clear()
        slots.clear()
        parts = capture.step(Step(n))
        per_step.append((sum(nodes), sum(slots)))
        if parts is not None:
            break
        pending = capture._catch_up
        assert (
            pending is not None and len(pending.todo) <= IMMEDIATE_NODES and len(pending.slots) <= IMMEDIATE_NODES
        )  # no set of every node or slot
        tree.change()
    assert len(per_step) > len(published.nodes) // NODE_CHUNK  # spread over steps
    # a step reads one chunk of each; the step that publishes also reads its own few marks and slots
    assert all(read <= NODE_CHUNK and rebuilt <= SLOT_CHUNK for read, rebuilt in per_step[:-1])
    assert per_step[-1][0] <= NODE_CHUNK + IMMEDIATE_NODES and per_step[-1][1] <= SLOT_CHUNK + IMMEDIATE_NODES
    apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
    assert published == full_read(tree.scheduler, sink, n)  # the one delta equals a full capture
    assert errors.total == 0


def test_a_catch_ups_bulk_goes_before_the_marks_that_arrive_every_step(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """Marks arrive every step while the tree changes: read first, they would take every step's
    budget and the sweep of the whole tree would never end."""
    sink, errors = hooks
    tree, capture, published = overflowed_tree(sink)
    arena = tree.scheduler.tree_cache.tree_core._node_arena
    bulk_steps = -(-len(arena) // NODE_CHUNK) + -(-len(published.nodes) // NODE_CHUNK)  # the sweep, then `gone`
    state, n = catch_up(tree, capture, published)
    assert n <= bulk_steps + 10  # a few more for the marks left once the bulk is done
    assert state == full_read(tree.scheduler, sink, n)
    assert errors.total == 0


def test_a_published_state_is_frozen_under_the_lock_and_stays_as_taken(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """What a snapshot takes under the inspector's lock (`Capture.published`) is the baseline's
    shards, not a copy of them; the steps after it change the baseline, never what was taken,
    and a catch-up's published state is the one before it however far it has read."""
    sink, _ = hooks
    tree, capture, taken = grown_tree(sink)
    published = capture.published()
    assert all(shard is capture._nodes._shards[i] for i, shard in published.nodes._shards.items())  # nothing copied
    for n in range(1, 4):
        tree.change()
        assert capture.step(Step(n)) is not None
    assert capture.state != taken
    assert published.to_cache_state() == taken
    moved = capture.state
    for _ in range(GROUPS * PER_GROUP):  # a catch-up: its published state is `moved` until it ends
        tree.insert()
    assert capture.step(Step(4)) is None
    during = capture.published()
    tree.change()
    assert capture.step(Step(5)) is None
    assert during.to_cache_state() == moved == capture.state


def test_a_tree_grown_unwatched_is_read_once_and_its_taken_slots_swept(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """Every new node is both marked by the hooks and in the arena's tail: the sweep of the tail
    drops the marks of what it read, so each is read once (they were read twice). The slots the
    tree took left the free list: more than a step reads, they are swept in chunks, never held as
    a set of every slot, and a slot swept drops its pending rebuild."""
    sink, errors = hooks
    tree = Tree()
    capture = Capture(tree.scheduler, sink, budget_s=0.0)
    published = capture.full_state(Step(0))
    arena = tree.scheduler.tree_cache.tree_core._node_arena
    before = len(arena)
    for _ in range(GROUPS * PER_GROUP):
        tree.insert()
    grown = len(arena) - before
    nodes, slots, _ = spy(capture)
    n = 0
    while True:
        n += 1
        parts = capture.step(Step(n))
        if parts is not None:
            break
        pending = capture._catch_up
        assert pending is not None and len(pending.slots) <= IMMEDIATE_NODES  # no set of every taken slot
        tree.change()  # a few marks a step, read again
    apply_delta(published, parts.to_delta(seq=Seq(n), step=Step(n), events=[], counters=Counters()))
    assert published == full_read(tree.scheduler, sink, n)
    changed = 10 * n  # tree.change() marks a few nodes a step (inserts, a split, a match, an eviction)
    assert grown <= sum(nodes) <= grown + changed < 2 * grown
    assert sum(slots) <= 2 * grown + changed  # the free list's and the new nodes' slots, each once
    assert errors.total == 0


def test_the_state_a_catch_up_published_is_freed_a_few_shards_a_step(hooks: tuple[EventSink, ErrorCounter]) -> None:
    """When a catch-up publishes, the state it served meanwhile is dropped: the shards the
    baseline copied since (every slot's, after a tree filled up unwatched) would be freed in
    that one step. The capture keeps them and frees RETIRED_A_STEP a step."""
    sink, _ = hooks
    tree, capture, published = grown_unwatched(sink)
    assert capture.step(Step(1)) is None
    during = capture.published()
    shards = [id(shard) for shard in during.nodes.shards() + during.slots.shards()]
    del during
    _, n = catch_up(tree, capture, published)
    assert sorted(map(id, capture._retired)) == sorted(shards)  # none freed in the step that published
    left = len(capture._retired)
    while left:
        tree.change()
        assert capture.step(Step(n := n + 1)) is not None
        assert len(capture._retired) == max(0, left - RETIRED_A_STEP)
        left = len(capture._retired)
