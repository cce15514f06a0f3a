"""Graphviz render: folding keeps totals, ids / colours / highlights in DOT and SVG, dot binary errors.

States are built from schema records (tests/support/record_states.py). SVG checks need a Graphviz binary (system `dot`, or
`pip install graphviz-pure`, or MCINSPECT_DOT) and are skipped without one.
"""

from __future__ import annotations

import os
import stat
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from mcinspect.render import (
    DotFailed,
    DotNotFound,
    DotTimeout,
    Highlight,
    UnknownFocus,
    find_dot,
    parse_focus,
    render,
    render_dot,
    select,
    tree_totals,
    view_totals,
)
from mcinspect.render._style import FOCUS_BORDER, NODE_FILL, SLOT_FILL, VIOLATION_BORDER
from mcinspect.schema import CacheState, NodeId, Rid, SlotId, Step

from record_states import make_request, make_state, random_state, small_state

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"


def accounted(state: CacheState, view: Any) -> dict[int, str]:
    """Where each node went: 'drawn', 'chain' or 'fold' (asserting each node is in exactly one)."""
    where: dict[int, str] = {}
    for node in view.nodes:
        assert node not in where
        where[node] = "drawn"
    for chain in view.chains:
        for node in chain.nodes:
            assert node not in where
            where[node] = "chain"
    roots = {root for fold in view.folds for root in fold.roots}
    for node in state.nodes:
        walk = node
        while walk in state.nodes and walk not in where and walk not in roots:
            walk = state.nodes[walk].parent
        if node not in where:
            assert walk in roots or where.get(walk) == "fold", f"node {node} is neither drawn, in a chain nor below a fold"
            where[node] = "fold"
    return where


# --- folding ----------------------------------------------------------------------------------


def test_small_tree_is_drawn_whole() -> None:
    state = small_state()
    view = select(state, max_nodes=100)
    assert sorted(view.nodes) == sorted(state.nodes) and not view.chains and not view.folds
    source = render_dot(state)
    for node in state.nodes:
        assert f'id="node-{node}"' in source


@pytest.mark.parametrize("bias", [0.0, 0.5, 0.95])
@pytest.mark.parametrize("max_nodes", [1, 7, 60])
def test_folding_keeps_totals_and_accounts_for_every_node(bias: float, max_nodes: int) -> None:
    state = random_state(400, seed=int(bias * 100) + max_nodes, fanout_bias=bias)
    view = select(state, max_nodes=max_nodes, pinned=[r.last_node for r in state.requests.values()])
    assert view_totals(view) == tree_totals(state) == view.tree
    where = accounted(state, view)
    assert len(where) == len(state.nodes)
    path_len = sum(1 for n in state.nodes.values() if n.full_lock)  # the request's path is pinned
    assert view.boxes <= max(max_nodes, path_len + 2 * len(view.folds) + 1)
    if max_nodes >= 60:
        assert view.boxes <= max_nodes


def test_folding_prefers_locked_and_mamba_subtrees() -> None:
    # root -> 1 (locked path to 2), -> 3 with a mamba slot, -> 4..40 plain leaves: the plain
    # leaves fold first.
    parents = {0: -1, 1: 0, 2: 1, 3: 0, **{n: 0 for n in range(4, 40)}}
    state = make_state(parents, slots={2: 1, 3: 2}, locked={1, 2})
    view = select(state, max_nodes=6)
    assert {1, 2, 3} <= set(view.nodes)
    assert view_totals(view) == tree_totals(state)
    assert [f.roots for f in view.folds] and all(set(f.roots) <= set(range(4, 40)) for f in view.folds)


def test_deep_chain_folds_without_recursion() -> None:
    n = 100_000
    parents = {0: -1, **{node: node - 1 for node in range(1, n)}}
    state = make_state(parents, key_len=1, slots={n - 1: 1}, requests=[make_request("deep", n - 1, 2, (3, 4))])
    view = select(state, max_nodes=50, pinned=[NodeId(n - 1)])
    assert view_totals(view) == tree_totals(state)
    assert n - 1 in view.nodes and view.chains and max(len(c.nodes) for c in view.chains) > n - 10
    source = render_dot(state, max_nodes=50)
    assert "+100k nodes (chain)" in source or "+99.9k nodes (chain)" in source
    assert f'id="node-{n - 1}"' in source


def test_orphans_and_parent_cycles_are_counted_once() -> None:
    # 5's parent is missing; 7 and 8 are each other's parent (a bug the render must survive).
    state = make_state({0: -1, 1: 0, 5: 99, 7: 8, 8: 7})
    for max_nodes in (1, 2, 100):
        view = select(state, max_nodes=max_nodes)
        assert view_totals(view) == tree_totals(state)
        assert len(accounted(state, view)) == 5


# --- focus ------------------------------------------------------------------------------------


def test_focus_on_request_draws_its_path_and_neighbourhood() -> None:
    parents = {0: -1, **{n: n - 1 for n in range(1, 6)}, **{n: 0 for n in range(10, 30)}}
    requests = [make_request("req-f", 5, 2, (3, 4)), make_request("req-other", 20, 6, (7, 8))]
    state = make_state(parents, slots={5: 1}, locked={1, 2, 3, 4, 5}, requests=requests)
    view = select(state, max_nodes=100, focus=NodeId(5), focus_radius=1)
    assert view_totals(view) == tree_totals(state)
    drawn = set(view.nodes) | {n for c in view.chains for n in c.nodes}
    assert {0, 1, 2, 3, 4, 5} <= drawn and not drawn & set(range(10, 30))
    source = render_dot(state, focus=Rid("req-f"), focus_radius=1)
    assert 'class="locked mamba focus"' in source and 'id="req-req-f"' in source
    assert 'id="req-req-other"' not in source and "1 of 2 requests" in source and 'id="node-20"' not in source


def test_bad_focus_is_a_one_line_error() -> None:
    state = small_state()
    for focus in (NodeId(999), Rid("nope")):
        with pytest.raises(UnknownFocus) as caught:
            render_dot(state, focus=focus)
        assert "\n" not in str(caught.value) and "mcinspect snapshot" in str(caught.value)
    assert parse_focus(state, "req-a") == "req-a" and parse_focus(state, "4") == 4
    with pytest.raises(UnknownFocus):
        parse_focus(state, "12345")


# --- DOT ------------------------------------------------------------------------------------


def test_dot_marks_states_slots_and_violations() -> None:
    state = small_state()
    source = render_dot(
        state,
        violations=[Highlight(nodes=[NodeId(2)], slots=[SlotId(7)], rids=[Rid("req-a")], reason="owned twice"), ([NodeId(77)], [], [])],
    )
    assert 'id="node-1", class="locked mamba"' in source
    assert 'id="node-2", class="violation evictable mamba"' in source
    assert 'id="node-5", class="tombstone evictable"' in source and "rounded,dashed" in source
    assert 'id="node-77", class="missing violation"' in source
    assert 'PORT="slot" ID="slot-1-node-1"' in source and "fp 23456789" in source
    assert 'id="req-req-a-working"' in source and 'id="req-req-a-pp1", label="pp1 LAST seqlen 64"' in source
    assert 'id="slot-7", class="slot ping_pong1 violation"' in source
    assert "VIOLATION: owned twice" in source and 'id="legend"' in source
    assert render(state, "dot") == render_dot(state).encode()  # no binary needed for DOT


# --- SVG (needs a dot binary) ---------------------------------------------------------------


def svg_of(state: CacheState, **options: Any) -> dict[str, ET.Element]:
    try:
        find_dot()
    except DotNotFound as exc:
        pytest.skip(f"no Graphviz binary ({exc})")
    root = ET.fromstring(render(state, "svg", **options))
    return {g.get("id", ""): g for g in root.iter(f"{SVG}g")}


def first_fill(group: ET.Element) -> tuple[str | None, str | None, str | None]:
    """(fill, stroke, stroke-width) of the first filled shape of a box."""
    for shape in group.iter():
        if shape.tag in (f"{SVG}polygon", f"{SVG}path", f"{SVG}ellipse") and shape.get("fill") not in (None, "none"):
            return shape.get("fill"), shape.get("stroke"), shape.get("stroke-width")
    return None, None, None


def borders(group: ET.Element) -> set[tuple[str | None, str | None]]:
    return {(s.get("stroke"), s.get("stroke-width")) for s in group.iter() if s.get("stroke") not in (None, "none")}


def test_svg_has_every_box_with_its_colours_and_tooltips() -> None:
    state = small_state()
    groups = svg_of(state, violations=[([NodeId(2)], [SlotId(7)], [Rid("req-a")], "owned twice")])
    for node in state.nodes:
        assert f"node-{node}" in groups
    assert first_fill(groups["node-1"])[0] == NODE_FILL["locked"][0]
    assert first_fill(groups["node-5"])[0] == NODE_FILL["tombstone"][0]
    assert first_fill(groups["node-0"])[0] == NODE_FILL["plain"][0]
    assert first_fill(groups["node-2"])[0] == NODE_FILL["violation"][0]
    assert (VIOLATION_BORDER, "3") in borders(groups["node-2"])
    assert "node locked mamba" == groups["node-1"].get("class")
    for slot, node in ((1, 1), (2, 2), (3, 4)):
        assert f"a_slot-{slot}-node-{node}" in groups
    assert first_fill(groups["a_slot-1-node-1"])[0] == SLOT_FILL["tree"][0]
    for slot, key in ((5, "working"), (6, "ping_pong0"), (7, "ping_pong1")):
        assert first_fill(groups[f"slot-{slot}"])[0] == SLOT_FILL[key][0]
    assert (VIOLATION_BORDER, "3") in borders(groups["slot-7"]) and (VIOLATION_BORDER, "3") in borders(groups["req-req-a"])
    for edge in ("req-req-a-working", "req-req-a-pp0", "req-req-a-pp1", "req-req-a-last", "tree-n3-n4"):
        assert edge in groups
    titles = [a.get(XLINK_TITLE, "") for a in groups["node-4"].iter(f"{SVG}a")]
    assert any("depth 48, key 16 tokens" in t and "locks: full 1, mamba 1" in t for t in titles)
    assert "legend" in groups


def test_svg_of_a_folded_tree_accounts_for_every_node() -> None:
    state = random_state(3_000, seed=5, fanout_bias=0.7)
    groups = svg_of(state, max_nodes=80)
    view = select(
        state, max_nodes=80, pinned=[r.last_node for r in state.requests.values()], unchained=[r.last_node for r in state.requests.values()]
    )
    drawn = {int(i.split("-")[1]) for i in groups if i.startswith("node-")}
    assert drawn == set(view.nodes)
    assert {i for i in groups if i.startswith(("chain-", "fold-"))} == (
        {f"chain-{c.nodes[0]}" for c in view.chains} | {f"fold-{'top' if f.parent == 'top' else f.parent}" for f in view.folds}
    )
    assert len(accounted(state, view)) == len(state.nodes)


def test_svg_focus_border() -> None:
    groups = svg_of(small_state(), focus=NodeId(3))
    assert (FOCUS_BORDER, "3") in borders(groups["node-3"])


def test_png_output() -> None:
    try:
        find_dot()
    except DotNotFound as exc:
        pytest.skip(f"no Graphviz binary ({exc})")
    assert render(small_state(), "png").startswith(b"\x89PNG\r\n\x1a\n")


# --- the dot binary ---------------------------------------------------------------------------


def fake_binary(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-dot"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_missing_binary_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCINSPECT_DOT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(DotNotFound) as caught:
        render(small_state(), "svg")
    message = str(caught.value)
    assert "\n" not in message and "pip install graphviz-pure" in message and "MCINSPECT_DOT" in message
    monkeypatch.setenv("MCINSPECT_DOT", str(tmp_path / "nowhere"))
    with pytest.raises(DotNotFound, match="MCINSPECT_DOT"):
        find_dot()


def test_pip_provided_binary_is_found_beside_the_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCINSPECT_DOT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    fake_binary(bin_dir, "exit 0")
    os.rename(bin_dir / "fake-dot", bin_dir / "graphviz-pure")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    found = find_dot()
    assert found.source == "graphviz-pure" and found.path == str(bin_dir / "graphviz-pure")


def test_failing_and_hanging_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCINSPECT_DOT", fake_binary(tmp_path, "echo 'Error: syntax error in line 3' >&2\nexit 1"))
    with pytest.raises(DotFailed) as caught:
        render(small_state(), "svg")
    assert "syntax error in line 3" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setenv("MCINSPECT_DOT", fake_binary(tmp_path, "exec sleep 30"))
    with pytest.raises(DotTimeout, match="--max-nodes"):
        render(small_state(), "svg", timeout_s=0.3)


def test_checks_violations_highlight_directly() -> None:
    violation_module = pytest.importorskip("mcinspect.checks.violation")
    violation = violation_module.Violation(
        check="slot_owned_twice",
        step=Step(3),
        reason="slot 7 is claimed by pp1 of req-a and tree #2",
        nodes=(NodeId(2),),
        slots=(SlotId(7),),
        rids=(Rid("req-a"),),
    )
    source = render_dot(small_state(), violations=[violation])
    assert 'id="node-2", class="violation evictable mamba"' in source
    assert "VIOLATION: slot_owned_twice: slot 7 is claimed by pp1 of req-a and tree #2" in source
    assert 'id="slot-7", class="slot ping_pong1 violation"' in source
