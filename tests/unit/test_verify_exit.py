"""`mcinspect verify`'s exit code from the engine's verdicts (mcinspect/verify_command.py)."""

from __future__ import annotations

from mcinspect.schema import NodeId, NodeVerdict, SlotId
from mcinspect.verify_command import exit_code, judge


def verdict(node: int, temporal: float = 0.0, error: str = "", skipped: bool = False) -> NodeVerdict:
    return NodeVerdict(NodeId(node), SlotId(node), 64, "engine", 0.0, temporal, error=error, forward="extend", skipped=skipped)


def test_equal_mismatch_and_unverifiable() -> None:
    assert exit_code([judge(verdict(1)), judge(verdict(2))]) == 0
    assert exit_code([judge(verdict(1)), judge(verdict(2, temporal=0.5))]) == 1
    assert exit_code([judge(verdict(1, temporal=float("nan")))]) == 1  # NaN is not equal
    assert exit_code([judge(verdict(1)), judge(verdict(9, error="the node holds no mamba state"))]) == 2


def test_a_node_the_load_kept_from_its_turn_is_skipped_only_under_all() -> None:
    gone = judge(verdict(3, error="the node lost its state before its turn", skipped=True))
    assert exit_code([judge(verdict(1)), gone], everything=True) == 0
    assert exit_code([judge(verdict(1, temporal=0.5)), gone], everything=True) == 1
    assert exit_code([judge(verdict(1)), gone]) == 2  # a node the user named
    assert exit_code([gone], everything=True) == 2  # nothing verified at all
