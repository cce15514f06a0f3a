"""An engine of several ranks in the inspector: the committed recordings of `demo --tp 2` (clean,
and with the tp-desync fault on rank 1) replayed rank by rank, and the same served live through
the engine side's real transport (two ranks on consecutive port pairs, discovered from the base
port). The expectations come from the recordings' states, compared field by field here."""

from __future__ import annotations

import msgspec
from recorded_engine import RecordedEngine
from snapshot_apps.replay_app import PINNED_NOW, load, load_ranks, make_ranks_app, stand_in_checks

from mcinspect.checks import Violation, cross_rank
from mcinspect.checks.cross_rank import disagreements
from mcinspect.schema import CacheState, Snapshot, Step
from mcinspect.target import Target
from mcinspect.tui import InspectorApp, RankSources, StaticSource, attach_app, rank_summary
from mcinspect.tui.details import Selection
from mcinspect.tui.findings import Findings
from mcinspect.tui.rank_summary import RankInput
from mcinspect.tui.ranks_table import RanksTable

from engine_runs import free_ports_for_ranks
from factory import state as make_state
from facts import states
from helpers import pilot_until, run_async, settle

SIZE = (160, 45)


def _differ(a: CacheState, b: CacheState) -> bool:
    """Whether two ranks' states differ in what every TP rank must share (all but clocks)."""
    clockless = {node: msgspec.structs.replace(record, last_access=0.0) for node, record in a.nodes.items()}
    theirs = {node: msgspec.structs.replace(record, last_access=0.0) for node, record in b.nodes.items()}
    return a.requests != b.requests or a.slots != b.slots or clockless != theirs


def _steps_that_differ(name: str) -> list[int]:
    ours = {s.step: s for s in states(name)}
    theirs = {s.step: s for s in states(f"{name}.rank1")}
    return sorted(step for step in ours.keys() & theirs.keys() if _differ(ours[step], theirs[step]))


async def _go_to(pilot, step: int) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("g", *str(step), "enter")
    await settle(pilot)


@run_async
async def test_one_rank_has_no_switcher_and_two_have_one() -> None:
    app = InspectorApp(load("clean"), checks=stand_in_checks)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "R" not in app.screen.active_bindings and "rank 0 of" not in str(app.query_one("#header").render())
        await pilot.press("6")
        assert app.query_one("#tabs").active != "ranks"  # one rank: nothing to compare
    app = make_ranks_app("tp2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "R" in app.screen.active_bindings and "rank 0 of 2" in str(app.query_one("#header").render())
        assert app.source.name == "tp2.mcrec" and app.view.state == states("tp2")[-1]


@run_async
async def test_R_shows_the_same_step_on_the_next_rank_and_comes_round_again() -> None:
    app = make_ranks_app("tp2-desync")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _go_to(pilot, 20)
        await pilot.press("R")
        await settle(pilot)
        rank1_at_20 = next(s for s in states("tp2-desync.rank1") if s.step == 20)
        assert app.rank == 1 and app.source.name == "tp2-desync.rank1.mcrec" and not app.following
        assert app.view.state == rank1_at_20 and "rank 1 of 2" in str(app.query_one("#header").render())
        await pilot.press("R")
        await settle(pilot)
        assert app.rank == 0 and app.view.state == next(s for s in states("tp2-desync") if s.step == 20)


@run_async
async def test_a_step_the_other_rank_lacks_shows_its_frame_before_and_says_so() -> None:
    """A sampled live stream captures each rank at its own moments."""
    ranks = RankSources([StaticSource([make_state(step) for step in (1, 2, 3)]), StaticSource([make_state(step) for step in (1, 3)])])
    app = InspectorApp(ranks)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _go_to(pilot, 2)
        await pilot.press("R")
        await settle(pilot)
        assert app.rank == 1 and app.view.state.step == Step(1)
        assert any("rank 1 has no frame at step 2: showing step 1" in str(n.message) for n in app._notifications)
        await pilot.press("R")
        await _go_to(pilot, 2)
        await pilot.press("6")
        await settle(pilot)
        summary = app._summary
        assert summary is not None and [row.verdict for row in summary.rows] == ["reference", "not compared"]


@run_async
async def test_following_the_engine_follows_the_next_rank_too() -> None:
    app = make_ranks_app("tp2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.following
        await pilot.press("R")
        await settle(pilot)
        assert app.following and app.view.state == states("tp2.rank1")[-1]


@run_async
async def test_tp_agree_finds_the_desynchronised_rank_at_every_step_it_differs() -> None:
    """The ranks agree up to the fault's first act (step 15), then rank 1's bookkeeping differs:
    the app's tp-agree lists each such step on rank 1, none on rank 0 or on the clean run."""
    differing = _steps_that_differ("tp2-desync")
    assert differing and differing[0] == 15 and _steps_that_differ("tp2") == []
    app = make_ranks_app("tp2-desync")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        found = app.ranks.views[1].findings.violations()
        assert sorted({row.step for row in found if row.check == "tp-agree"}) == differing
        assert app.ranks.views[0].findings.violations() == []
        await _go_to(pilot, differing[0])
        assert "rank 1 differs here" in str(app.query_one("#header").render())
    app = make_ranks_app("tp2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert all(view.findings.violations() == [] for view in app.ranks.views)


@run_async
async def test_the_ranks_tab_compares_the_ranks_at_the_step_on_view(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Its verdicts are tp-agree's findings (agreement.py compared every step already): the tab
    compares no tree itself."""

    def compared_again(*args: object) -> None:
        raise AssertionError("the ranks tab compared two trees again")

    monkeypatch.setattr(cross_rank, "disagreements", compared_again)
    app = make_ranks_app("tp2-desync")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _go_to(pilot, 14)
        await pilot.press("6")
        await settle(pilot)
        rows = app._summary.rows
        assert [row.verdict for row in rows] == ["reference", "agrees"] and [row.step for row in rows] == [14, 14]
        at_15 = [next(s for s in states(name) if s.step == 15) for name in ("tp2-desync", "tp2-desync.rank1")]
        (rid,) = [rid for rid in at_15[0].requests if at_15[0].requests[rid] != at_15[1].requests.get(rid)]
        await pilot.press("right_square_bracket")
        await settle(pilot)
        rows = app._summary.rows
        assert rows[1].verdict.startswith("DIFFERS") and rid in rows[1].note
        assert rows[1].nodes == len(at_15[1].nodes) and rows[1].requests == len(at_15[1].requests)
        table = app.query_one(RanksTable)
        table.focus()
        await pilot.press("down")
        assert app.selection == Selection("rank", 1)
        assert rid in str(app.query_one("#detail").render())
        await pilot.press("enter")
        await settle(pilot)
        assert app.rank == 1 and app.view.state == at_15[1]


@run_async
async def test_attach_discovers_every_rank_from_the_base_port() -> None:
    """Two ranks served by the engine side's real transport at PORT and PORT + 2: `attach PORT`
    follows both, and tp-agree finds the desynchronised one."""
    port = free_ports_for_ranks(2)
    engines = [RecordedEngine("tp2-desync", port), RecordedEngine("tp2-desync.rank1", port + 2)]
    app = attach_app((Target("127.0.0.1", port),), token="", every_step=True)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot_until(pilot, lambda: len(app.ranks.views) == 2 and all(view.frames for view in app.ranks.views))
            assert [view.source.name for view in app.ranks.views] == [
                f"127.0.0.1:{port} (every step)",
                f"127.0.0.1:{port + 2} (every step)",
            ]
            for engine in engines:
                engine.publish_rest()
            newest = states("tp2-desync")[-1].step
            await pilot_until(pilot, lambda: all(view.frames and view.frames[-1].step == newest for view in app.ranks.views))
            first = _steps_that_differ("tp2-desync")[0]
            await pilot_until(pilot, lambda: any(row.step == first for row in app.ranks.views[1].findings.violations()), timeout_s=20)
            await pilot.press("R")
            await settle(pilot)
            assert app.rank == 1 and app.view.state == states("tp2-desync.rank1")[-1]
    finally:
        for engine in engines:
            engine.stop()


@run_async
async def test_a_rank_that_does_not_answer_is_named_while_the_view_waits() -> None:
    port = free_ports_for_ranks(2)
    engine = RecordedEngine("tp2", port)  # rank 0 says the engine has 2 ranks; rank 1 is not there
    app = attach_app((Target("127.0.0.1", port),), token="")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot_until(pilot, lambda: "rank 1 of 2" in app.source.health().last_error, timeout_s=15)
            assert f"127.0.0.1:{port + 2}" in app.source.health().last_error and app.view is None
            assert "connecting" in str(app.query_one("#header").render())
    finally:
        engine.stop()


@run_async
async def test_exports_of_a_rank_say_which(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = InspectorApp(load_ranks("tp2"), checks=stand_in_checks, clock=lambda: PINNED_NOW, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await _go_to(pilot, 20)
        await pilot.press("R", "e")
        await pilot_until(pilot, lambda: any(tmp_path.glob("*.json")))
        (exported,) = tmp_path.glob("*.json")
        assert exported.name == "mcinspect-rank1-step20-20260101T000000Z.json"
        assert msgspec.json.decode(exported.read_bytes(), type=Snapshot).state == next(s for s in states("tp2.rank1") if s.step == 20)


def test_a_step_tp_agree_has_not_reached_is_said_to_be_compared_still() -> None:
    ranks = load_ranks("tp2-desync").sources()
    inputs = [RankInput(source, list(source.frames()), Findings(None)) for source in ranks]
    summary = rank_summary.summarise(15, inputs, lambda rank, index: None)
    assert [row.verdict for row in summary.rows] == ["reference", "comparing"] and summary.agree is None

    # Once compared, the verdict is tp-agree's findings at the frame.
    def compared(rank: int, index: int) -> tuple[Violation, ...]:
        ours = ranks[rank].state_at(index)
        reference = next(ranks[0].state_at(f.index) for f in reversed(list(ranks[0].frames())) if f.step == ours.step)
        return tuple(disagreements(ours.step, reference, ours, rank, 0))

    whole = rank_summary.summarise(15, inputs, compared)
    assert whole.rows[1].verdict.startswith("DIFFERS") and whole.agree is False
