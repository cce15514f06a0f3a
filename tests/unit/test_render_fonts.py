"""The SVG render is legible with the fonts a Linux desktop has (issue 13, point 6): every label
inside its box when drawn with DejaVu, the legend beside the tree, not over it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from svg_text import have_fonts, overflows

from mcinspect.check_driver import CheckDriver
from mcinspect.recording import RecordingReader
from mcinspect.render import render
from mcinspect.render._binary import DotNotFound, find_dot
from mcinspect.schema import CacheState, Counters

from record_states import random_state

FAULT = Path(__file__).parents[1] / "tui" / "recordings" / "fault.mcrec"

try:
    find_dot()
    HAVE_DOT = True
except DotNotFound:
    HAVE_DOT = False

pytestmark = [
    pytest.mark.skipif(not have_fonts(), reason="the DejaVu fonts are not installed"),
    pytest.mark.skipif(not HAVE_DOT, reason="no dot binary"),
]


def _svg(state: CacheState, max_nodes: int = 80) -> str:
    violations = CheckDriver().step(state, (), counters=Counters(), restart=True)
    return render(state, "svg", max_nodes=max_nodes, violations=violations).decode()


def _boxes(svg: str) -> dict[str, tuple[float, float, float, float]]:
    out = {}
    for group, body in re.findall(r'<g id="([^"]+)" class="node[^"]*">(.*?)</g>', svg, re.S):
        points = [tuple(map(float, p.split(","))) for pl in re.findall(r'points="([^"]+)"', body) for p in pl.split()]
        if points:
            xs, ys = zip(*points)
            out[group] = (min(xs), min(ys), max(xs), max(ys))
    return out


@pytest.mark.parametrize("which", ["fault recording", "random 300-node state"])
def test_labels_fit_their_boxes_in_dejavu(which: str) -> None:
    state = RecordingReader(FAULT).last_state().state if which == "fault recording" else random_state(300, seed=3, fanout_bias=0.5)
    svg = _svg(state)
    assert 'font-family="DejaVu Sans' in svg
    assert overflows(svg) == []  # with Helvetica: the legend's lines ran 16-23 pt past its box


def test_the_legend_is_beside_the_tree() -> None:
    boxes = _boxes(_svg(random_state(300, seed=3, fanout_bias=0.5)))
    left, top, right, bottom = boxes.pop("legend")
    over = [name for name, (l0, t0, r0, b0) in boxes.items() if not (r0 <= left or l0 >= right or b0 <= top or t0 >= bottom)]
    assert over == []
    assert left >= max(r for _, _, r, _ in boxes.values())  # the last column
