"""The live stream's capture plan: within the time budget, between its rate bounds."""

from __future__ import annotations

from mcinspect_engine_hooks.live_cadence import LiveCadence

STEP_S = 0.0125
"""The CPU demo's step."""


def _run(cadence: LiveCadence, steps: int, *, per_step_s: float, capture_s: float) -> tuple[list[int], float]:
    """Drive `steps` boundaries of STEP_S: the hooks cost per_step_s a step, a capture
    capture_s. Returns the captured steps and the inspector's share of the wall time."""
    now, spent, captured, due = 0.0, 0.0, [], False
    for step in range(1, steps + 1):
        now += STEP_S
        spent += per_step_s
        if due:
            cadence.captured(now, now + capture_s)
            spent += capture_s
            captured.append(step)
        due = cadence.due_next(now, spent)
    return captured, spent / now


def test_captures_keep_the_inspector_within_its_budget() -> None:
    captured, share = _run(LiveCadence(budget=0.01), 4000, per_step_s=0.00005, capture_s=0.001)
    assert share <= 0.01
    gaps = [b - a for a, b in zip(captured, captured[1:])][1:]  # the first capture overdraws
    # what is left of 1% after 0.4% per step pays a 1 ms capture every ~14 steps (~6 a second)
    assert 12 <= min(gaps) and max(gaps) <= 16, gaps
    assert len(captured) >= 4000 * STEP_S * 5


def test_a_lower_budget_buys_fewer_captures_for_the_same_share() -> None:
    many, share_many = _run(LiveCadence(budget=0.01), 4000, per_step_s=0.00005, capture_s=0.001)
    few, share_few = _run(LiveCadence(budget=0.006), 4000, per_step_s=0.00005, capture_s=0.001)
    assert share_few <= 0.006 < share_many <= 0.01
    assert len(few) < len(many) / 2


def test_cheap_captures_are_bounded_by_the_frame_rate() -> None:
    captured, _ = _run(LiveCadence(budget=0.01, min_interval_s=0.1), 800, per_step_s=0.0, capture_s=0.00001)
    gaps = [b - a for a, b in zip(captured, captured[1:])]
    assert min(gaps) >= 0.1 / STEP_S - 1 and max(gaps) <= 0.1 / STEP_S + 1, gaps


def test_a_view_never_freezes_even_over_budget() -> None:
    """Per-call hook cost alone above the budget: still one capture a second."""
    captured, _ = _run(LiveCadence(budget=0.01, max_interval_s=1.0), 800, per_step_s=0.0002, capture_s=0.001)
    gaps = [b - a for a, b in zip(captured, captured[1:])]
    assert max(gaps) <= 1.0 / STEP_S + 1, gaps
    assert len(captured) >= 800 * STEP_S - 1


def test_the_first_step_after_a_client_arrives_is_captured() -> None:
    cadence = LiveCadence()
    assert cadence.due_next(100.0, 5.0)


def test_a_quiet_stretch_buys_no_burst() -> None:
    """Credit is capped at one max_interval_s worth: after a long unwatched stretch the stream
    resumes at its budgeted rate, not with a flood of frames."""
    cadence = LiveCadence(budget=0.01, min_interval_s=0.1, max_interval_s=1.0)
    cadence.due_next(0.0, 0.0)
    cadence.captured(0.0, 0.004)  # a 4 ms capture
    assert cadence.due_next(0.5, 0.004)  # 5 ms earned in 0.5 s, 4 spent... and none used since
    cadence.captured(0.5, 0.504)
    assert not cadence.due_next(0.7, 0.008)  # 2 ms more earned, but 4 ms spent meanwhile
    assert cadence.due_next(60.0, 0.008)  # a minute later: afresh (credit 0), the frame floor
    cadence.captured(60.0, 60.004)
    assert not cadence.due_next(60.2, 0.012)  # overdrawn: no burst


def test_an_idle_engine_catches_up_within_the_budget_and_the_frame_rate() -> None:
    cadence = LiveCadence(budget=0.01, min_interval_s=0.1)
    cadence.idle_due(10.0, 0.0)
    cadence.captured(10.0, 10.001)  # a 1 ms capture
    assert not cadence.idle_due(10.05, 0.001)  # too soon for a view (and the credit is spent)
    assert not cadence.idle_due(10.11, 0.001)  # 1.1 ms earned, 1 ms spent: not another 1 ms
    assert cadence.idle_due(10.25, 0.001)  # 2.5 ms earned
