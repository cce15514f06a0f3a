"""The TUI's work per live frame on a large tree, both ways side by side on the same frames: a
frame rebuilt by the source (a keyframe and up to 99 deltas, as a live session keeps them) against
the frame on view moved by the deltas between (`tui/source.deltas_between`).

- follow: the UI thread's refresh while following, 5 frames on (as 100 ms of a busy engine):
  the new FrameView with its tree children and pages, from a rebuilt frame and a scan of both
  trees, against the deltas between and their node changes (`NodeChanges.across`);
- tp-agree: the TUI's comparison of one rank's frame with its reference's (tui/agreement.py):
  both frames rebuilt and compared whole (`disagreements`), against the state cursors and the
  pair (`StateCursor`, `PairAgreement`); rank 1 is rank 0 decoded apart with its own clock.

The frames are bench_check_step.py's (a tree of N nodes, a fragmented free list, each step a few
nodes changed, tokens taken and freed). Prints the median and worst ms of each. Not a timed test.

Run: `.venv/bin/python tests/bench/bench_tui_follow.py [--nodes 100000] [--runs 62000] [--frames 200]`
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))

import msgspec  # noqa: E402
from bench_check_step import frames, on_rank_one  # noqa: E402

from mcinspect.checks.cross_rank import PairAgreement, RankKeys, disagreements  # noqa: E402
from mcinspect.tui import replay_source  # noqa: E402
from mcinspect.tui.model import FrameView  # noqa: E402
from mcinspect.tui.source import NodeChanges, deltas_between, moved_by  # noqa: E402
from mcinspect.tui.state_cursor import StateCursor  # noqa: E402

FOLLOW_GAP = 5


def built(view: FrameView) -> FrameView:
    """`view` with its tree children and pages built, as the tree and the page map build them."""
    _ = view.children, view.tree_pages
    return view


def line(label: str, before: list[float], after: list[float]) -> str:
    ms = lambda xs: f"{1e3 * statistics.median(xs):7.1f} / {1e3 * max(xs):6.1f}"  # noqa: E731
    return f"{label:<10} {ms(before):>17} {ms(after):>17} {statistics.median(before) / statistics.median(after):7.1f}x"


def follow(source: replay_source.ReplaySource, count: int) -> tuple[list[float], list[float]]:
    """Each way in a pass of its own (one's garbage is not the other's to collect)."""
    starts = range(FOLLOW_GAP, count - FOLLOW_GAP, 7)
    shown = {start: built(FrameView(start, source.state_at(start), [])) for start in starts}
    rebuilt, moved, views = [], [], {}
    gc.collect()
    for start in starts:
        end = start + FOLLOW_GAP
        began = time.perf_counter()
        views[end] = built(FrameView(end, source.state_at(end), [], previous=shown[start]))
        rebuilt.append(time.perf_counter() - began)
    gc.collect()
    for start in starts:
        end = start + FOLLOW_GAP
        began = time.perf_counter()
        deltas = deltas_between(source, start, end)
        assert deltas is not None
        state = moved_by(shown[start].state, deltas)
        patched = built(FrameView(end, state, [], previous=shown[start], changes=NodeChanges.across(deltas)))
        moved.append(time.perf_counter() - began)
        assert patched.state == views[end].state and patched.children == views[end].children
    return rebuilt, moved


def agreement(ours: replay_source.ReplaySource, theirs: replay_source.ReplaySource, count: int) -> tuple[list[float], list[float]]:
    """Each way in a pass of its own, over every frame (the first, where both compare whole, not counted)."""
    whole, paired = [], []
    gc.collect()
    for index in range(count):
        began = time.perf_counter()
        mine, reference = theirs.state_at(index), ours.state_at(index)
        assert disagreements(mine.step, reference, mine, 1, 0) == []
        whole.append(time.perf_counter() - began)
    pair, our_cursor, their_cursor = PairAgreement(1, 0), StateCursor(theirs), StateCursor(ours)
    gc.collect()
    for index in range(count):
        began = time.perf_counter()
        (mine, our_changes), (reference, their_changes) = our_cursor.at(index), their_cursor.at(index)
        assert pair.compare(mine.step, reference, mine, RankKeys.joined(our_changes, their_changes)) == []
        paired.append(time.perf_counter() - began)
    return whole[1:], paired[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=62_000)
    parser.add_argument("--frames", type=int, default=200)
    args = parser.parse_args()
    replay_source.KEYFRAME_EVERY = 100  # as a live session keeps its history
    made = [frame for frame, _ in frames(args.nodes, args.runs, args.frames)]
    first = made[0]
    ours = replay_source.ReplaySource(made, None, "rank 0")
    theirs = replay_source.ReplaySource(
        [msgspec.structs.replace(first, state=on_rank_one(first.state)), *map(on_rank_one, made[1:])], None, "rank 1"
    )
    count = len(made)
    print(f"{args.nodes} nodes, {args.runs} free runs, {count} frames; ms a frame, median / worst")
    print(f"{'':<10} {'source rebuilds':>17} {'deltas between':>17} {'ratio':>8}")
    print(line("follow", *follow(ours, count)))
    print(line("tp-agree", *agreement(ours, theirs, count)))


if __name__ == "__main__":
    main()
