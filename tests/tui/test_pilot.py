"""Behaviour through the keyboard: navigation, time travel, jumps, search, exports."""

from __future__ import annotations

import msgspec
from data import demo_events, demo_info, demo_states
from helpers import run_async, settle
from snapshot_apps.demo_app import make_demo_app

from mcinspect.schema import Snapshot
from mcinspect.tui import InspectorApp, StaticSource, checks_checker
from mcinspect.tui.app import Selection
from mcinspect.tui.grids import PageMap, SlotMap
from mcinspect.tui.model import SlotOwner
from mcinspect.tui.palette import SLOT_STYLES, VIOLATION_STYLE
from mcinspect.tui.screens import HelpScreen
from mcinspect.tui.tree_view import RadixTreeView

SIZE = (120, 36)


def slot_colour(app, slot: int):
    slot_map = app.query_one(SlotMap)
    return slot_map.cell(slot_map.view.slot_ids.index(slot))[1]


@run_async
async def test_opens_on_the_newest_step_with_its_violation() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.view is not None and app.view.state.step == 43
        assert [v.slot for v in app.ledger.violations()] == [14]
        assert app.view.slot_owners[14] is SlotOwner.MULTIPLE


@run_async
async def test_mcinspect_checks_find_the_doubly_owned_slot() -> None:
    """The real checks (not the tests' stand-in) over the demo data, off the UI thread."""
    source = StaticSource(states=demo_states(), events=demo_events(), info=demo_info())
    app = InspectorApp(source, checker=checks_checker(source.engine))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        found = {(v.step, v.check, v.slot) for v in app.ledger.violations()}
        assert (43, "slot-partition", 14) in found
        assert {v.step for v in app.ledger.violations()} == {43}


@run_async
async def test_a_failing_checker_is_reported_not_fatal() -> None:
    def broken(previous, state, frame):
        raise RuntimeError("boom")

    source = StaticSource(states=demo_states(), events=demo_events(), info=demo_info())
    app = InspectorApp(source, checker=broken)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        assert app.is_running and app.view.state.step == 43
        assert any("boom" in str(n.message) for n in app._notifications)


@run_async
async def test_tree_navigation_selects_and_expands() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        tree = app.query_one(RadixTreeView)
        tree.focus()
        await pilot.press("down", "down")
        assert tree.cursor_node == 2
        assert app.selection == Selection("node", 2)
        rows = tree.row_count
        await pilot.press("right")
        assert 2 in tree.expanded and tree.row_count == rows + 1
        await pilot.press("left")
        assert 2 not in tree.expanded and tree.row_count == rows
        await pilot.press("left")  # on a collapsed node: go to the parent
        assert tree.cursor_node == 1


@run_async
async def test_step_back_changes_the_step_and_the_slot_map() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert slot_colour(app, 14) == VIOLATION_STYLE  # the doubly owned slot
        await pilot.press("left_square_bracket")
        assert app.view.state.step == 42 and not app.following
        assert slot_colour(app, 14) == SLOT_STYLES[SlotOwner.PING_PONG_1]
        await pilot.press("left_square_bracket")
        assert app.view.state.step == 41
        assert slot_colour(app, 9) == SLOT_STYLES[SlotOwner.COW_SOURCE]  # r-b1 copies from node #5's slot
        await pilot.press("left_square_bracket")
        assert slot_colour(app, 15) == SLOT_STYLES[SlotOwner.FREE]  # r-b1 not admitted yet
        await pilot.press("right_square_bracket")
        assert app.view.state.step == 41
        await pilot.press("left_curly_bracket")
        assert app.view.state.step == 40  # clamped to the oldest frame
        await pilot.press("G")
        assert app.view.state.step == 43 and app.following


@run_async
async def test_go_to_step() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g", "4", "1", "enter")
        await settle(pilot)
        assert app.view.state.step == 41


@run_async
async def test_next_violation_jumps_to_step_node_and_slot() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("left_square_bracket", "left_square_bracket", "v")
        await settle(pilot)
        assert app.view.state.step == 43
        assert app.selection == Selection("slot", 14)
        assert app.query_one(RadixTreeView).cursor_node == 8
        slot_map = app.query_one(SlotMap)
        assert slot_map.has_focus and slot_map.slot_at(slot_map.cursor) == 14


@run_async
async def test_enter_on_a_violation_jumps() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("left_square_bracket", "5", "enter")
        await settle(pilot)
        assert app.view.state.step == 43
        assert app.selection == Selection("slot", 14)


@run_async
async def test_search_by_token_ids_reveals_the_node() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"7777", "enter")
        await settle(pilot)
        tree = app.query_one(RadixTreeView)
        assert tree.cursor_node == 8 and 4 in tree.expanded


@run_async
async def test_selecting_a_request_marks_its_path_and_pages() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("3", "down")
        assert app.selection == Selection("request", "r-b1")
        assert app.query_one(RadixTreeView)._on_path == {0, 5}
        await pilot.press("2")
        page_map = app.query_one(PageMap)
        highlighted = [i for i in range(page_map.count) if page_map.cell(i)[0] == "▪"]
        assert highlighted == [21, 22, 23, 30, 31, 32]  # node #5's three pages, then its own three


@run_async
async def test_enter_on_a_page_lists_its_holders() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("2")
        app.query_one(PageMap).move_to(21)
        await pilot.press("enter")
        assert app.selection == Selection("page", 21, full=True)
        detail = str(app.query_one("#detail").render())
        assert "#5" in detail and "r-b1" in detail


@run_async
async def test_event_filter() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("4")
        app.query_one("#event-filter").focus()
        await pilot.press(*"insert")
        lines = app.query_one("#event-lines").lines
        assert len(lines) == 1 and "insert" in lines[0] and "slot=14" in lines[0]


@run_async
async def test_exports(tmp_path) -> None:
    app = make_demo_app(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e", "s", "r")
        await settle(pilot)
        messages = [str(n.message) for n in app._notifications]
    tree_svg = tmp_path / "mcinspect-tree-step43-20260101T000000Z.svg"
    assert tree_svg.exists() or any("dot" in m.lower() or "graphviz" in m.lower() for m in messages), messages
    json_file = tmp_path / "mcinspect-step43-20260101T000000Z.json"
    snapshot = msgspec.json.decode(json_file.read_bytes(), type=Snapshot)
    assert snapshot.state.step == 43 and len(snapshot.state.nodes) == 9
    assert (tmp_path / "mcinspect-step43-20260101T000000Z.svg").read_text().startswith("<svg")


@run_async
async def test_help_and_command_palette() -> None:
    app = make_demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "ctrl+p")
        await settle(pilot)
        assert type(app.screen).__name__ == "CommandPalette"
        await pilot.press(*"step back", "enter")
        await settle(pilot)
        assert app.view.state.step == 42
