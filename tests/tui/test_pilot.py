"""Behaviour through the keyboard on the fault recording (tests/tui/recordings/fault.mcrec):
navigation, time travel, jumps, search, exports. What the panels must show is read from the
recording's states here, independently of the panels."""

from __future__ import annotations

import msgspec
from rich.segment import Segment
from snapshot_apps.replay_app import load, make_app
from textual.geometry import Region

from mcinspect.schema import CacheState, InsertEvent, NodeId, Rid, SlotClaim, SlotId, Snapshot
from mcinspect.tui import InspectorApp, StaticSource
from mcinspect.tui.app import Selection
from mcinspect.tui.grids import PageMap, SlotMap
from mcinspect.tui.line_view import LineView
from mcinspect.tui.model import FrameView, SlotOwner, slot_owner
from mcinspect.tui.palette import SLOT_STYLES, VIOLATION_STYLE
from mcinspect.tui.requests_table import RequestsTable
from mcinspect.tui.screens import HelpScreen
from mcinspect.tui.tree_view import RadixTreeView

from facts import ancestors, first_double_claim, pages, states
from helpers import pilot_until, run_async, settle

SIZE = (120, 36)
FAULT = load("fault")
STATES = states("fault")
NEWEST = len(STATES) - 1
MID_RUN = 45
"""A step with four running requests and a tree of nine nodes."""


def slot_colour(app: InspectorApp, slot: SlotId):  # type: ignore[no-untyped-def]
    slot_map = app.query_one(SlotMap)
    return slot_map.cell(slot_map.view.slot_ids.index(slot))[1]


async def go_to_step(pilot, step: int) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("g", *str(step), "enter")
    await settle(pilot)


@run_async
async def test_opens_on_the_newest_step_with_every_slot_of_the_pool() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.view.frame == NEWEST and app.view.state.step == STATES[-1].step and app.following
        slot_map = app.query_one(SlotMap)
        assert slot_map.count == FAULT.engine().mamba_pool_size
        assert [slot_map.slot_at(i) for i in range(slot_map.count)] == sorted(STATES[-1].slots)
        for slot, claims in STATES[-1].slots.items():  # each cell has its owner's colour
            assert slot_colour(app, slot) == SLOT_STYLES[slot_owner(claims)]
        held = sum(any(claim.kind != "free" for claim in claims) for claims in STATES[-1].slots.values())
        grey = sum(slot_colour(app, slot) == SLOT_STYLES[SlotOwner.FREE] for slot in STATES[-1].slots)
        assert held > 0 and grey == slot_map.count - held


@run_async
async def test_a_tree_message_that_arrives_after_the_screen_emptied_is_ignored() -> None:
    """Quitting right after the first frame, the tree's first NodeHighlighted can reach the app
    after the screen's widgets are gone (run_test re-raises any exception the app had)."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        tree = app.query_one(RadixTreeView)
        tree.focus()
        await pilot.pause()
        await app.query_one("#body").remove()
        app.post_message(RadixTreeView.NodeHighlighted(tree, NodeId(0)))
        await pilot.pause()


@run_async
async def test_mcinspect_checks_find_the_slot_claimed_twice() -> None:
    """The real checks, off the UI thread, report the first double claim at its frame."""
    frame, slot = first_double_claim()
    app = make_app(real_checks=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        violations = app.findings.violations()
        assert min(v.frame for v in violations) == frame
        assert any(v.frame == frame and v.check == "slot-partition" and slot in v.violation.slots for v in violations)


@run_async
async def test_a_failing_checker_is_reported_not_fatal() -> None:
    def broken(previous, state, frame, delta):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    app = InspectorApp(load("fault"), checks=lambda source: broken)
    async with app.run_test(size=SIZE) as pilot:
        await pilot_until(pilot, lambda: any("boom" in str(n.message) for n in app._notifications))
        await settle(pilot)
        assert app.is_running and app.view.frame == NEWEST


@run_async
async def test_tree_navigation_selects_collapses_and_expands() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        state = STATES[-1]
        (root,) = (node.id for node in state.nodes.values() if node.parent not in state.nodes)
        first = min(node.id for node in state.nodes.values() if node.parent == root)
        below = sum(node.parent == first for node in state.nodes.values())
        assert below > 0
        tree = app.query_one(RadixTreeView)
        tree.focus()
        await pilot.press("down")
        assert tree.cursor_node == first and app.selection == Selection("node", first)
        rows = tree.row_count
        assert first in tree.expanded  # the first level opens with the tree
        await pilot.press("left")
        assert first not in tree.expanded and tree.row_count == rows - below
        await pilot.press("right")
        assert first in tree.expanded and tree.row_count == rows
        await pilot.press("left", "left")  # collapse, then from a collapsed node to its parent
        assert tree.cursor_node == root


@run_async
async def test_time_travel_moves_every_panel_to_the_frame() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        before, newest = STATES[-2], STATES[-1]
        moved = next(s for s, claims in before.slots.items() if slot_owner(claims) != slot_owner(newest.slots[s]))
        assert slot_colour(app, moved) == SLOT_STYLES[slot_owner(newest.slots[moved])]
        await pilot.press("left_square_bracket")
        assert app.view.frame == NEWEST - 1 and app.view.state.step == before.step and not app.following
        assert slot_colour(app, moved) == SLOT_STYLES[slot_owner(before.slots[moved])]
        assert app.query_one(RadixTreeView).row_count > 0
        await pilot.press("left_curly_bracket")
        assert app.view.frame == NEWEST - 11
        await pilot.press("right_square_bracket")
        assert app.view.frame == NEWEST - 10
        await go_to_step(pilot, 0)
        await pilot.press("left_square_bracket")
        assert app.view.frame == 0  # clamped to the oldest frame
        await pilot.press("G")
        assert app.view.frame == NEWEST and app.following


def painted(panel: LineView) -> list[list[Segment]]:
    """The panel's lines as the screen holds them (lines not marked for repaint come from cache)."""
    return [list(strip) for strip in panel.render_lines(Region(0, 0, *panel.region.size))]


def repainted(panel: LineView) -> list[list[Segment]]:
    """The panel's lines after a repaint of every line."""
    panel.refresh()
    return painted(panel)


@run_async
async def test_a_new_frame_repaints_what_a_full_repaint_would() -> None:
    """The tree and the maps repaint only the lines a new frame changes: stepping through the
    run, with a request selected (its path and pages marked), must show what a full repaint shows."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await go_to_step(pilot, MID_RUN)
        await pilot.press("3", "down")
        for tab, panel in (("1", app.query_one(SlotMap)), ("2", app.query_one(PageMap))):
            await pilot.press(tab)
            tree = app.query_one(RadixTreeView)
            for key in ["left_square_bracket"] * 12 + ["right_square_bracket"] * 24:
                await pilot.press(key)
                for shown in (tree, panel):
                    assert painted(shown) == repainted(shown), (app.view.frame, type(shown).__name__)


@run_async
async def test_a_jump_forward_moves_the_view_by_the_deltas_between() -> None:
    """`}` (ten frames on, as following a live engine shows its newest frame) moves the frame on
    view by the deltas between: the source rebuilds none of those frames, and the state, the
    tree's children and its pages are a fresh view's."""
    app = make_app()
    source = app.source
    rebuilt: list[int] = []
    state_at = source.state_at
    source.state_at = lambda index: rebuilt.append(index) or state_at(index)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await go_to_step(pilot, 0)
        await pilot.press("2")  # the page map builds the tree's pages: later views patch them
        shown = []
        for _ in range(4):
            await pilot.press("right_curly_bracket")
            view = app.view
            shown.append(view.frame)
            fresh = FrameView(view.frame, state_at(view.frame), [])
            assert view.state == fresh.state and view.children == fresh.children, view.frame
            assert (view.tree_pages.flags, view.tree_pages.extra) == (fresh.tree_pages.flags, fresh.tree_pages.extra)
        assert len(set(shown)) == 4 and not set(shown) & set(rebuilt), (shown, rebuilt)


async def slot_map_lines(frames: list[CacheState], steps: int) -> list[list[list[Segment]]]:
    """The slot map's lines at each of the last `steps` + 1 frames, reached one step at a time."""
    app = InspectorApp(StaticSource(frames), checks=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press(*["left_square_bracket"] * steps)
        lines = [painted(app.query_one(SlotMap))]
        for _ in range(steps):
            await pilot.press("right_square_bracket")
            lines.append(painted(app.query_one(SlotMap)))
        return lines


@run_async
async def test_a_slot_that_flips_every_frame_is_repainted_every_frame() -> None:
    """One slot free, working, free, ... (nothing else changes): stepping through the frames
    shows each as an app opened on that frame does."""
    first = STATES[0]
    slot = min(first.slots)
    flips = [[SlotClaim(slot=slot, kind="free")], [SlotClaim(slot=slot, kind="working", rid=Rid("r"))]]
    frames = [msgspec.structs.replace(first, step=first.step + i, slots=first.slots | {slot: flips[i % 2]}) for i in range(6)]
    stepped = await slot_map_lines(frames, len(frames) - 1)
    for frame in range(len(frames)):
        assert stepped[frame] == (await slot_map_lines(frames[: frame + 1], 0))[0], frame


@run_async
async def test_go_to_step() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await go_to_step(pilot, MID_RUN)
        assert app.view.state.step == MID_RUN and app.view.state == STATES[MID_RUN]


@run_async
async def test_next_violation_jumps_to_its_step_node_and_slot() -> None:
    frame, slot = first_double_claim()
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        first, second = app.findings.violations()[:2]
        assert (first.frame, first.slot) == (frame, slot)
        await go_to_step(pilot, 0)
        await pilot.press("v")
        await settle(pilot)
        assert app.view.frame == frame and app.selection == Selection("slot", slot)
        assert app.query_one(RadixTreeView).cursor_node == first.node
        slot_map = app.query_one(SlotMap)
        assert slot_map.has_focus and slot_map.slot_at(slot_map.cursor) == slot
        assert slot_colour(app, slot) == VIOLATION_STYLE
        await pilot.press("v")
        await settle(pilot)
        assert app.view.frame == second.frame and app.selection == Selection("slot", second.slot)


@run_async
async def test_enter_on_a_violation_jumps() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        second = app.findings.violations()[1]
        await pilot.press("5", "down", "enter")
        await settle(pilot)
        assert app.view.frame == second.frame and app.selection == Selection("slot", second.slot)


@run_async
async def test_violations_are_grouped_by_cause_and_a_group_expands() -> None:
    from mcinspect.checks import group_violations
    from mcinspect.tui.violations_table import ViolationsTable

    app = make_app(real_checks=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        found = app.findings.violations()
        groups = group_violations([v.violation for v in found])
        await pilot.press("5")
        await settle(pilot)
        table = app.query_one(ViolationsTable)
        assert table.row_count == len(groups) < len(found)  # 20 groups of the 72 violations
        assert groups[0].repeats > 1
        await pilot.press("space")  # the first group: its occurrences below it
        await settle(pilot)
        assert table.row_count == len(groups) + groups[0].repeats
        later = [v for v in found if v.violation.slots == found[0].violation.slots and v.violation.nodes == found[0].violation.nodes][-1]
        await pilot.press(*["down"] * groups[0].repeats, "enter")  # its last occurrence
        await settle(pilot)
        assert app.view.frame == later.frame
        table.focus()
        await pilot.press("home", "space")
        await settle(pilot)
        assert table.row_count == len(groups)


@run_async
async def test_search_by_token_ids_reveals_the_node() -> None:
    state = STATES[-1]
    deepest = max(state.nodes.values(), key=lambda node: (node.depth, node.id))
    query = deepest.token_ids[:3]
    holders = sorted(n.id for n in state.nodes.values() if any(n.token_ids[i : i + 3] == query for i in range(len(n.token_ids))))
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *" ".join(map(str, query)), "enter")
        await settle(pilot)
        tree = app.query_one(RadixTreeView)
        assert tree.cursor_node == holders[0]
        assert set(ancestors(state, holders[0])[1:]) <= tree.expanded


@run_async
async def test_selecting_a_request_marks_its_path_and_pages() -> None:
    state = STATES[MID_RUN]
    rid = sorted(state.requests)[1]
    request = state.requests[rid]
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await go_to_step(pilot, MID_RUN)
        await pilot.press("3", "down")
        assert app.selection == Selection("request", rid)
        assert app.query_one(RadixTreeView)._on_path == set(ancestors(state, request.last_node))
        await pilot.press("2")
        page_map = app.query_one(PageMap)
        highlighted = [i for i in range(page_map.count) if page_map.cell(i)[0] == "▪"]
        assert highlighted == pages(request.kv_runs, state.kv.page_size)


@run_async
async def test_the_request_cursor_stays_on_its_rid_across_steps() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await go_to_step(pilot, MID_RUN)
        await pilot.press("3", "down", "down")
        table = app.query_one(RequestsTable)
        rid = table.selected_rid
        assert rid == sorted(STATES[MID_RUN].requests)[2] and table.row_count == len(STATES[MID_RUN].requests)
        await pilot.press("right_square_bracket")
        assert rid in STATES[MID_RUN + 1].requests and table.selected_rid == rid


@run_async
async def test_enter_on_a_page_lists_its_holders() -> None:
    state = STATES[MID_RUN]
    node = next(n for n in sorted(state.nodes.values(), key=lambda n: n.id) if n.kv_runs and not n.kv_evicted)
    page = node.kv_runs[0][0] // state.kv.page_size
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await go_to_step(pilot, MID_RUN)
        await pilot.press("2")
        app.query_one(PageMap).move_to(page)
        await pilot.press("enter")
        assert app.selection == Selection("page", page, full=True)
        assert f"#{node.id}" in str(app.query_one("#detail").render())


@run_async
async def test_event_filter() -> None:
    inserts = sum(isinstance(event, InsertEvent) for frame in FAULT.frames() for event in frame.events)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("4")
        app.query_one("#event-filter").focus()
        await pilot.press(*"insert")
        lines = app.query_one("#event-lines").lines
        assert inserts > 0 and len(lines) == inserts and all(" insert " in line for line in lines)


@run_async
async def test_exports(tmp_path) -> None:  # type: ignore[no-untyped-def]
    step = STATES[-1].step
    app = make_app(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e", "s", "r")
        await settle(pilot)
        messages = [str(n.message) for n in app._notifications]
    tree_svg = tmp_path / f"mcinspect-tree-step{step}-20260101T000000Z.svg"
    assert tree_svg.exists() or any("dot" in m.lower() or "graphviz" in m.lower() for m in messages), messages
    snapshot = msgspec.json.decode((tmp_path / f"mcinspect-step{step}-20260101T000000Z.json").read_bytes(), type=Snapshot)
    assert snapshot.state == STATES[-1]
    assert (tmp_path / f"mcinspect-step{step}-20260101T000000Z.svg").read_text().startswith("<svg")


@run_async
async def test_help_and_command_palette() -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "ctrl+p")
        await settle(pilot)
        assert type(app.screen).__name__ == "CommandPalette"
        await pilot.press(*"step back", "enter")
        await settle(pilot)
        assert app.view.frame == NEWEST - 1


@run_async
async def test_moving_between_panels_keeps_the_footer() -> None:
    """The footer's keys are the same in every panel: moving the focus must not rebuild them."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        keys = list(app.query("FooterKey"))
        assert [key.key for key in keys][:2] == ["p", "left_square_bracket"]
        for press in ("1", "t", "3", "5", "t"):
            await pilot.press(press)
            await settle(pilot)
        assert list(app.query("FooterKey")) == keys
        await pilot.press("question_mark")
        await pilot.press("escape")
        await settle(pilot)
        assert [key.key for key in app.query("FooterKey")] == [key.key for key in keys]


def test_recording_holds_what_these_tests_need() -> None:
    """A regenerated recording must still have a step per frame, a mid-run step and requests to select."""
    assert [frame.step for frame in FAULT.frames()] == list(range(len(STATES)))
    assert len(STATES[MID_RUN].requests) >= 3 and len(STATES[MID_RUN].nodes) > 3
    assert len(STATES[-1].nodes) > len(STATES[MID_RUN].nodes)
    assert Rid(sorted(STATES[MID_RUN].requests)[2]) in STATES[MID_RUN + 1].requests
