"""The pure parts: slot and page classification, page index, tree rows, search, findings, key tables."""

from __future__ import annotations

import random
import re

import msgspec
from snapshot_apps.replay_app import load

from mcinspect.schema import CacheState, KvState, NodeId, NodeRecord, SlotClaim, SlotId, Step, pack_tokens
from mcinspect.tui.app import InspectorApp
from mcinspect.tui.findings import Findings
from mcinspect.tui.ingest import FrameStates
from mcinspect.tui.model import FrameView, PageOwner, SlotOwner, runs_after, slot_owner
from mcinspect.tui.page_index import TreePages
from mcinspect.tui.source import NodeChanges
from mcinspect.tui.tree_index import ROOT_PARENT, build_children, patch_children
from mcinspect.tui.tree_rows import CHILD_PAGE, build_rows, limit_to_show
from mcinspect.tui.violations import real_checks

import factory
from facts import first_double_claim, states


def _node(node_id: int, parent: int, tokens: list[int] | None = None, runs=None) -> NodeRecord:
    tokens = tokens or [node_id]
    return factory.node(node_id, parent, 0, len(tokens), tokens=pack_tokens(tokens), key_hash=0, kv_runs=runs or [])


def _state(nodes: list[NodeRecord], free_runs=None, size: int = 64) -> CacheState:
    return CacheState(
        step=Step(1), nodes={n.id: n for n in nodes}, slots={}, requests={},
        kv=KvState(page_size=4, size=size, free_runs=free_runs or []),
    )  # fmt: skip


def test_slot_owner_classes() -> None:
    s = SlotId(5)
    assert slot_owner([SlotClaim(slot=s, kind="free")]) is SlotOwner.FREE
    assert slot_owner([SlotClaim(slot=s, kind="ping_pong", ping_pong_index=1)]) is SlotOwner.PING_PONG_1
    assert slot_owner([SlotClaim(slot=s, kind="tree"), SlotClaim(slot=s, kind="cow_source")]) is SlotOwner.COW_SOURCE
    assert slot_owner([SlotClaim(slot=s, kind="tree"), SlotClaim(slot=s, kind="working")]) is SlotOwner.MULTIPLE
    assert slot_owner([]) is SlotOwner.UNACCOUNTED


def test_runs_after_drops_the_protected_prefix() -> None:
    assert runs_after([(0, 4), (10, 4)], 6) == [(12, 2)]
    assert runs_after([(0, 4)], 0) == [(0, 4)]
    assert runs_after([(0, 4)], 9) == []


def test_page_owners_flag_free_and_held_pages() -> None:
    view = FrameView(0, _state([_node(1, -1, runs=[(0, 8)])], free_runs=[(4, 8)], size=16), [])
    assert list(view.page_owners) == [PageOwner.TREE, PageOwner.TREE | PageOwner.FREE, PageOwner.FREE, PageOwner.NONE]


def test_runs_outside_the_pool_are_clipped() -> None:
    view = FrameView(0, _state([_node(1, -1, runs=[(12, 100)]), _node(2, -1, runs=[(-8, 4)])], size=16), [])
    assert list(view.page_owners) == [PageOwner.NONE, PageOwner.NONE, PageOwner.NONE, PageOwner.TREE]


def test_search_matches_whole_tokens_only() -> None:
    # 256 = 0x100: its bytes appear inside [1, 1] shifted by one byte; that is not a match.
    view = FrameView(0, _state([_node(1, -1, [1, 1, 7]), _node(2, 1, [256, 7])]), [])
    assert view.search_tokens([256]) == [2]
    assert view.search_tokens([1, 7]) == [1]
    assert view.search_tokens([7]) == [1, 2]


def test_rows_page_children_and_reveal() -> None:
    nodes = [_node(0, -1)] + [_node(i, 0) for i in range(1, CHILD_PAGE + 51)]
    view = FrameView(0, _state(nodes), [])
    rows = build_rows(view, {NodeId(0)}, {})
    assert len(rows) == 1 + CHILD_PAGE + 1 and rows[-1].more == 50
    limits: dict[NodeId, int] = {}
    limit_to_show(view, NodeId(CHILD_PAGE + 40), limits)
    assert limits[NodeId(0)] == 2 * CHILD_PAGE
    assert len(build_rows(view, {NodeId(0)}, limits)) == 1 + CHILD_PAGE + 50


def test_a_deep_chain_needs_no_recursion() -> None:
    depth = 20_000
    view = FrameView(0, _state([_node(i, i - 1) for i in range(depth)]), [])
    assert view.children[ROOT_PARENT] == (0,)
    assert len(build_rows(view, set(range(depth)), {})) == depth
    assert len(view.path_to(NodeId(depth - 1))) == depth


def test_patched_index_equals_a_fresh_build() -> None:
    """Splits (a node re-parented under a new one), inserts and leaf removals, patched forward
    and back."""
    rng = random.Random(0)
    nodes = {NodeId(i): _node(i, (i - 1) // 3 if i else -1) for i in range(200)}
    index = build_children(nodes)
    next_id = 200
    for _ in range(50):
        new = dict(nodes)
        for _ in range(3):
            op = rng.randrange(3)
            if op == 0:  # insert a leaf
                new[NodeId(next_id)] = _node(next_id, rng.choice(list(new)), [next_id])
            elif op == 1:  # split: a new node between a node and its parent
                child = rng.choice([k for k in new if new[k].parent >= 0])
                new[NodeId(next_id)] = _node(next_id, new[child].parent)
                new[child] = _node(child, next_id)
            else:  # evict a leaf
                parents = {n.parent for n in new.values()}
                leaves = [k for k in new if k not in parents and new[k].parent >= 0]
                del new[rng.choice(leaves)]
            next_id += 1
        patched = patch_children(nodes, index, new)
        assert patched == build_children(new)
        forward = NodeChanges(tuple(k for k in new if nodes.get(k) is not new[k]), tuple(k for k in nodes if k not in new))
        assert patch_children(new, patched, nodes, forward.reversed()) == index  # a step back
        nodes, index = new, patched


def test_ledger_records_slot_history_and_checks_in_order() -> None:
    seen: list[int] = []

    def checker(previous, state, frame, delta):  # type: ignore[no-untyped-def]
        seen.append(frame.index)
        return []

    source, fault = load("fault"), states("fault")
    findings = Findings(checker)
    for frame in source.frames():
        findings.ingest(frame, source.state_at(frame.index))
    assert seen == list(range(len(fault))) and findings.next_frame == len(fault)
    claimed, slot = first_double_claim()
    expected = [(fault[0].step, list(fault[0].slots[slot]))] + [
        (state.step, list(state.slots[slot]))
        for before, state in zip(fault[:claimed], fault[1 : claimed + 1])
        if state.slots[slot] != before.slots[slot] or state.contents.get(slot) != before.contents.get(slot)
    ]
    history = findings.slot_history(slot, up_to_frame=claimed)
    assert [(change.step, list(change.claims)) for change in history] == expected
    assert len(history[-1].claims) == 2 and findings.slot_history(slot, up_to_frame=0) == history[:1]


def test_frames_taken_with_their_deltas_find_what_whole_states_find() -> None:
    """The ingest path (each state the last one moved by its frame's delta, the delta handed to
    the checks and the slot history) finds the same violations and slot changes as states the
    source rebuilds whole and checks compared whole."""
    found = {}
    for name in ("fault", "clean", "tp2-desync"):
        source = load(name)
        frames = source.frames()
        whole, by_delta = Findings(real_checks(source)), Findings(real_checks(source))
        taken = FrameStates(source)
        deltas = 0
        for frame in frames:
            state, delta = taken.take(frame)
            assert state == source.state_at(frame.index)
            deltas += delta is not None
            whole.ingest(frame, source.state_at(frame.index))
            by_delta.ingest(frame, state, delta)
        assert deltas == len(frames) - 1, name  # every frame but the recording's first snapshot
        rows = [(row.frame, row.violation) for row in by_delta.violations()]
        assert rows == [(row.frame, row.violation) for row in whole.violations()], name
        last = frames[-1].index
        for slot in source.state_at(last).slots:
            assert by_delta.slot_history(slot, last) == whole.slot_history(slot, last), (name, slot)
        found[name] = len(rows)
    assert found["fault"] > 0 and found["clean"] == 0, found


def _pages_node(node_id: int, runs: list[tuple[int, int]], evicted: bool = False) -> NodeRecord:
    return msgspec.structs.replace(_node(node_id, -1, runs=runs), kv_evicted=evicted)


def test_patched_tree_pages_equal_a_fresh_build() -> None:
    """Runs replaced, evicted, removed and added, pages shared by two nodes (a bug the map must
    keep showing while either node holds it): patched, with and without the frame's changes."""
    rng = random.Random(2)
    page_count, page_size = 40, 4

    def runs() -> list[tuple[int, int]]:
        return [(rng.randrange(-8, page_count * page_size), rng.randrange(0, 30)) for _ in range(rng.randrange(1, 3))]

    nodes = {NodeId(i): _pages_node(i, runs()) for i in range(30)}
    pages = TreePages.build(nodes, page_count, page_size, PageOwner.TREE)
    assert pages.extra  # random runs overlap: some pages are shared
    next_id = 30
    for round_ in range(60):
        new = dict(nodes)
        for _ in range(4):
            op, victim = rng.randrange(4), rng.choice(list(new))
            if op == 0:
                new[victim] = _pages_node(victim, runs())
            elif op == 1:
                new[victim] = _pages_node(victim, new[victim].kv_runs, evicted=not new[victim].kv_evicted)
            elif op == 2 and len(new) > 5:
                del new[victim]
            else:
                new[NodeId(next_id)] = _pages_node(next_id, runs())
                next_id += 1
        fresh = TreePages.build(new, page_count, page_size, PageOwner.TREE)
        changes = NodeChanges(tuple(k for k in new if nodes.get(k) is not new[k]), tuple(k for k in nodes if k not in new))
        for patched in (pages.patched(nodes, new, None), pages.patched(nodes, new, changes)):
            assert (patched.flags, patched.extra) == (fresh.flags, fresh.extra), round_
        nodes, pages = new, pages.patched(nodes, new, changes)


def test_page_owners_patch_through_views_that_never_showed_pages() -> None:
    fault = states("fault")
    first = FrameView(0, fault[0], [])
    assert first.page_owners
    view = first
    for frame in range(1, len(fault)):
        view = FrameView(frame, fault[frame], [], previous=view)
        if frame % 30 == 0:  # the page map shown now and then: patched from the last build
            assert view.page_owners == FrameView(frame, fault[frame], []).page_owners


def test_app_docstring_table_lists_every_binding() -> None:
    """The key table in InspectorApp's docstring is the help screen: it must not drift."""
    table = "\n".join(line for line in (InspectorApp.__doc__ or "").splitlines() if line.strip().startswith("|"))
    documented = set(re.findall(r"^\s*\| ([^|]+?) \|", table, re.MULTILINE)) - {"Key", ":-"}
    shown = {key.replace("1-5", "").strip() for key in documented}
    names = {
        "left_square_bracket": "[", "right_square_bracket": "]", "left_curly_bracket": "{",
        "right_curly_bracket": "}", "slash": "/", "question_mark": "?",
    }  # fmt: skip
    for binding in InspectorApp.BINDINGS:
        key = names.get(binding.key, binding.key)
        assert key.isdigit() or any(key in part.split(" / ") for part in shown), f"{binding.key} is not in the docstring table"


def test_a_step_back_patches_with_the_later_frames_changes_reversed() -> None:
    """Inserts, splits and evictions of the real engine, undone one frame at a time."""
    source, fault = load("fault"), states("fault")
    for index in range(len(fault) - 1, 0, -1):
        later = FrameView(index, fault[index], [])
        assert later.children and later.page_owners
        forward = source.node_changes(index)
        assert forward is not None
        earlier = FrameView(index - 1, fault[index - 1], [], previous=later, changes=forward.reversed())
        assert earlier.children == build_children(fault[index - 1].nodes)
        assert earlier.page_owners == FrameView(index - 1, fault[index - 1], []).page_owners
