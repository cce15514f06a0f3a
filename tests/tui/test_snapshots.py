"""SVG snapshots of the main screens at two terminal sizes (clock and data pinned).

Update after an intended change with `pytest tests/tui --snapshot-update` and look at the SVGs.
"""

from __future__ import annotations

import pytest
from helpers import settle_then
from snapshot_apps.demo_app import make_demo_app, make_disconnected_app

SIZES = [pytest.param((100, 30), id="100x30"), pytest.param((160, 45), id="160x45")]

SCREENS = {
    "main": (),
    "pages_of_request": ("3", "down", "2"),
    "requests": ("3",),
    "events": ("4",),
    "violations": ("5",),
    "jump_to_violation": ("5", "enter"),
    "step_back_twice": ("left_square_bracket", "left_square_bracket"),
    "help": ("question_mark",),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare, screen: str, size: tuple[int, int]) -> None:
    assert snap_compare(make_demo_app(), terminal_size=size, run_before=settle_then(*SCREENS[screen]))


@pytest.mark.parametrize("size", SIZES)
def test_disconnected(snap_compare, size: tuple[int, int]) -> None:
    """A live source that lost its engine: red status, reason, history still browsable."""
    assert snap_compare(make_disconnected_app(), terminal_size=size, run_before=settle_then())
