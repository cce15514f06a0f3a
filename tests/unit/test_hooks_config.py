"""Where the hooks listen: off by default, loopback by default, one port pair per rank."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from mcinspect_engine_hooks.config import ConfigError, HooksConfig
from mcinspect_engine_hooks.placement import Placement


def test_off_unless_port_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCINSPECT_PORT", raising=False)
    assert HooksConfig.from_env() is None


def test_loopback_by_default_and_remote_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCINSPECT_PORT", "7000")
    monkeypatch.delenv("MCINSPECT_HOST", raising=False)
    monkeypatch.delenv("MCINSPECT_TOKEN", raising=False)
    assert HooksConfig.from_env() == HooksConfig(base_port=7000, host="127.0.0.1")
    monkeypatch.setenv("MCINSPECT_HOST", "0.0.0.0")
    with pytest.raises(ConfigError, match="MCINSPECT_TOKEN"):
        HooksConfig.from_env()
    monkeypatch.setenv("MCINSPECT_TOKEN", "s3cret")
    assert HooksConfig.from_env() == HooksConfig(base_port=7000, host="0.0.0.0", token="s3cret")


def test_malformed_port_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCINSPECT_PORT", "77x")
    with pytest.raises(ConfigError, match="not a port"):
        HooksConfig.from_env()


def test_capture_mode_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCINSPECT_PORT", "7777")
    assert HooksConfig.from_env().capture == ""  # the inspector's default: on demand
    monkeypatch.setenv("MCINSPECT_CAPTURE", "every-step")
    assert HooksConfig.from_env().capture == "every-step"
    monkeypatch.setenv("MCINSPECT_CAPTURE", "always")
    with pytest.raises(ConfigError, match="on-demand, every-step"):
        HooksConfig.from_env()


def test_live_budget_is_a_share_of_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCINSPECT_PORT", "7777")
    monkeypatch.delenv("MCINSPECT_LIVE_BUDGET", raising=False)
    assert HooksConfig.from_env().live_budget == 0.008
    monkeypatch.setenv("MCINSPECT_LIVE_BUDGET", "0.05")
    assert HooksConfig.from_env().live_budget == 0.05
    for bad in ("5%", "0", "2", "-0.1"):
        monkeypatch.setenv("MCINSPECT_LIVE_BUDGET", bad)
        with pytest.raises(ConfigError, match=r"share of time in \(0, 1\]"):
            HooksConfig.from_env()


def test_every_rank_gets_its_own_port_pair() -> None:
    config = HooksConfig(base_port=7000)
    placements = [
        Placement(tp_rank=tp, tp_size=2, pp_rank=pp, pp_size=2, dp_rank=dp, replicas=2)
        for tp in range(2)
        for pp in range(2)
        for dp in range(2)
    ]
    assert {config.request_port(p.rank) for p in placements} == set(range(7000, 7016, 2))
    assert {p.world_size for p in placements} == {8}
    assert config.request_port(Placement().rank) == 7000 and Placement().world_size == 1


def test_a_scheduler_without_a_runtime_context_is_placed_by_its_own_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.13 keeps its ranks in `scheduler.ps` (a ParallelState), 0.5.10-0.5.12 on the scheduler
    itself; neither has a runtime context. Rank 1 must not read as rank 0 (its ports would clash)."""
    monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", None)  # its import fails, as there
    args = SimpleNamespace(dp_size=1)
    ps = SimpleNamespace(tp_rank=1, tp_size=2, pp_rank=0, pp_size=1, dp_rank=0, attn_dp_size=1)
    placed = Placement.of_scheduler(SimpleNamespace(ps=ps, server_args=args))
    assert (placed.rank, placed.world_size) == (1, 2)
    own = Placement.of_scheduler(SimpleNamespace(tp_rank=1, tp_size=2, server_args=args))
    assert (own.rank, own.world_size) == (1, 2)


def test_attention_data_parallel_groups_are_numbered_by_tp_rank() -> None:
    """Under attention DP sglang hands each scheduler its attention group as dp_rank (tp 2,
    attn-dp 2: tp0/dp0 and tp1/dp1): the ranks are still 0 and 1, no gap for discovery to stop at."""
    groups = [Placement(tp_rank=tp, tp_size=2, dp_rank=tp, attn_dp_size=2) for tp in range(2)]
    assert [p.rank for p in groups] == [0, 1] and {p.world_size for p in groups} == {2}
    replicas = [
        Placement(tp_rank=tp, tp_size=2, dp_rank=dp, replicas=2, attn_dp_size=2) for dp in range(4) for tp in range(2) if dp % 2 == tp
    ]
    assert sorted(p.rank for p in replicas) == [0, 1, 2, 3] and {p.world_size for p in replicas} == {4}


def test_track_write_hooks_can_be_left_out() -> None:
    from mcinspect_engine_hooks.events import EventSink, hook_points
    from mcinspect_engine_hooks.guard import ErrorCounter
    from mcinspect_engine_hooks.hooks_0523 import HOOKS
    from mcinspect_engine_hooks.state_log import StateLog

    assert HooksConfig.from_env({"MCINSPECT_PORT": "7777"}).track_writes is True
    assert HooksConfig.from_env({"MCINSPECT_PORT": "7777", "MCINSPECT_TRACK_WRITES": "off"}).track_writes is False
    with pytest.raises(ConfigError, match="MCINSPECT_TRACK_WRITES='no'"):
        HooksConfig.from_env({"MCINSPECT_PORT": "7777", "MCINSPECT_TRACK_WRITES": "no"})
    forward = "MambaAttnBackendBase._track_mamba_state_extend"
    with_writes = [target for target, _, _ in hook_points(EventSink(), ErrorCounter(), StateLog(), HOOKS)]
    without = [target for target, _, _ in hook_points(EventSink(), ErrorCounter(), StateLog(), HOOKS, track_writes=False)]
    assert any(t.endswith(forward) for t in with_writes) and not any(t.endswith(forward) for t in without)
    assert set(without) < set(with_writes)
