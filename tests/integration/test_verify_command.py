"""`mcinspect verify` against the live engine (tests/integration/conftest.py): the engine
prefills the chosen nodes' prefixes through its own forward pass while it idles, every clean
state comes back equal, and what cannot be verified is a clear answer with exit 2."""

from __future__ import annotations

import json
import subprocess

import pytest

from engine_runs import MCINSPECT
from live_demo import LiveDemo, snapshot_of

pytestmark = pytest.mark.slow


def verify(live: LiveDemo, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MCINSPECT, "verify", str(live.target.port), *args], capture_output=True, text=True, timeout=300)


def test_every_cached_state_of_the_live_engine_equals_its_recompute(live: LiveDemo) -> None:
    state = snapshot_of(live.target).state
    holders = {node.id for node in state.nodes.values() if node.mamba_slot > 0}
    done = verify(live, "--all", "--json")
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, ([row for row in rows if row["verdict"] != "equal"], done.stderr[-2000:])
    assert {row["node"] for row in rows} == holders and len(rows) >= 5
    verified = [row for row in rows if not row["skipped"]]  # the served trickle evicts some, fills the KV pool
    assert len(verified) >= 5
    assert all(row["verdict"] == "equal" and row["oracle"] == "engine" and row["tokens"] > 0 for row in verified)
    assert all(
        row["temporal_rel_l2"] <= row["tolerance"]["temporal"] and row["conv_rel_l2"] <= row["tolerance"]["conv"] for row in verified
    )
    after = snapshot_of(live.target).state
    assert after.nodes == state.nodes  # verifying changed nothing in the tree (hit counts, LRU included)


def test_chosen_nodes_and_an_unknown_one(live: LiveDemo) -> None:
    state = snapshot_of(live.target).state
    node = min(n.id for n in state.nodes.values() if n.mamba_slot > 0)
    done = verify(live, "--node", str(node), "--node", "999999")
    assert done.returncode == 2, done.stdout[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"node {node} slot ") and ": equal (engine oracle" in lines[0]
    assert lines[1] == "node 999999: not verified: the node holds no mamba state (unknown, evicted or a split parent)"
    alone = verify(live, "--node", str(node))
    assert alone.returncode == 0 and alone.stdout.splitlines() == lines[:1]


def test_info_shows_the_verifier(live: LiveDemo) -> None:
    done = subprocess.run([MCINSPECT, "info", str(live.target.port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "T2 verification by the engine oracle" in text and "0 mismatches" in text
