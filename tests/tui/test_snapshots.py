"""SVG snapshots of the main screens at two terminal sizes, replaying recordings of the real CPU
engine (tests/tui/recordings/, committed; the clock pinned, a fixed stand-in checker), one rank
and two (`demo --tp 2`, rank 1 desynchronised by the tp-desync fault from step 15).

Update after an intended change with `pytest tests/tui --snapshot-update` and look at the SVGs.
"""

from __future__ import annotations

import pytest
from snapshot_apps.replay_app import make_app, make_disconnected_app, make_ranks_app

from helpers import settle_then

SIZES = [pytest.param((100, 30), id="100x30"), pytest.param((160, 45), id="160x45")]

MID_RUN = ("g", "4", "5", "enter")
"""Step 45 of the fault recording: 9 nodes, 4 running requests, 6 slots claimed twice."""

SCREENS = {
    "main": (),  # the newest step: the engine idle, 18 nodes
    "mid_run": MID_RUN,
    "requests": (*MID_RUN, "3"),
    "pages_of_request": (*MID_RUN, "3", "down", "2"),
    "events": ("4",),
    "violations": ("5",),
    "jump_to_violation": ("5", "enter"),
    "step_back_twice": ("left_square_bracket", "left_square_bracket"),
    "help": ("question_mark",),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", list(SCREENS))
def test_fault_recording(snap_compare, screen: str, size: tuple[int, int]) -> None:
    assert snap_compare(make_app("fault"), terminal_size=size, run_before=settle_then(*SCREENS[screen]))


@pytest.mark.parametrize("size", SIZES)
def test_clean_recording_mid_run(snap_compare, size: tuple[int, int]) -> None:
    """Step 48 of the clean run: working, ping-pong and tree slots, no violation."""
    assert snap_compare(make_app("clean"), terminal_size=size, run_before=settle_then("g", "4", "8", "enter"))


@pytest.mark.parametrize("size", SIZES)
def test_disconnected(snap_compare, size: tuple[int, int]) -> None:
    """A live source that lost its engine: red status, reason, history still browsable."""
    assert snap_compare(make_disconnected_app(), terminal_size=size, run_before=settle_then())


AT_STEP_20 = ("g", "2", "0", "enter")
"""Step 20 of the tp-desync recording: rank 1 holds its requests in other slots since step 15."""

RANK_SCREENS = {
    "rank0": AT_STEP_20,  # the header: rank 0 of 2, and rank 1 differs here
    "rank1_same_step": (*AT_STEP_20, "R"),
    "ranks_tab": (*AT_STEP_20, "6", "down"),  # rank 1's row: its differences in the detail pane
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", list(RANK_SCREENS))
def test_two_ranks(snap_compare, screen: str, size: tuple[int, int]) -> None:
    assert snap_compare(make_ranks_app("tp2-desync"), terminal_size=size, run_before=settle_then(*RANK_SCREENS[screen]))


def test_two_ranks_that_agree(snap_compare) -> None:
    """The clean two-rank run's ranks tab: rank 1 agrees with rank 0."""
    assert snap_compare(make_ranks_app("tp2"), terminal_size=(160, 45), run_before=settle_then(*AT_STEP_20, "6"))
