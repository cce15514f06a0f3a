"""`mcinspect check`'s time a step on a large tree: what a client checking a production engine's
every-step stream spends on each frame, against the engine's step (20-50 ms).

A tree of N nodes (tests/support/record_states.random_state; a fingerprint for each cached
state) beside a fragmented KV free list of R runs; then `--steps` steps, each changing a few
nodes, fingerprinting two cached states again, allocating a few tokens and freeing a few (so
kv-pages looks for nodes holding the freed ones at every step), fed to the one check
driver (check_driver.py) as `check` feeds it: the state and the frame it came of; with `--tui`,
the frames of a recording of those steps through the TUI's ingest (tui/ingest.py: each frame's
state, its checks and slot history, as off the UI thread of `attach --every-step`); with
`--ranks`, tp-agree of two ranks given those frames (rank_agreement.py, as `check` of two ranks'
recordings or engines runs it). Each size runs
in a child process twice, first with `--before-site DIR`'s packages first on the path (e.g.
main's: `pip install --no-deps --target DIR .` of it), then with this tree's; prints the median
and worst ms a step after the first, the first (where a chain builds what it then hands from
view to view), and the before / after ratio of the medians.

Run: `.venv/bin/python tests/bench/bench_check_step.py --before-site DIR [--tui | --ranks] [--steps 30] [--sizes 10000:1000,100000:62000]`
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))


def frames(nodes: int, runs: int, steps: int) -> Iterator[tuple[Any, Any]]:
    """The first state's Snapshot and its state, then `steps` Deltas and the state each makes,
    each made when asked for (as a client decodes one frame after another)."""
    import msgspec

    from mcinspect import schema
    from mcinspect.schema import Counters, KvState, NodeId, Seq, SlotContent, Snapshot, Step, copy_state

    from record_states import random_state

    rng = random.Random(0)
    state = random_state(nodes, 0, 0.5)
    base = 10 * nodes + 1_000_000  # the free list lies apart from the nodes' KV (random_state's)
    state.kv = KvState(page_size=1, size=base + 10 * runs + 10, free_runs=[(base + 10 * i, 3) for i in range(runs)])
    state.contents = {
        slot: SlotContent(slot, rng.getrandbits(63), 0, False, Step(0)) for slot in state.slots
    }  # every cached state's fingerprint
    yield Snapshot(schema_version=schema.SCHEMA_VERSION, seq=Seq(0), state=copy_state(state), counters=Counters()), copy_state(state)
    cached = list(state.contents)
    for seq in range(1, steps + 1):
        free = state.kv.free_runs
        taken = [(free[0][0], 1)]  # a decode's token from the front
        i = rng.randrange(1, len(free) - 1)
        given = [(free[i][0] + 5, 2)]  # a finished request's tokens, between two runs
        ids = rng.sample([n for n in state.nodes if n > 0], 4)
        upserts = [msgspec.structs.replace(state.nodes[NodeId(n)], hit_count=seq) for n in ids]
        # two fingerprints taken again at this boundary (a recheck's), the same bits
        prints = {slot: msgspec.structs.replace(state.contents[slot], step=Step(state.step + 1)) for slot in rng.sample(cached, 2)}
        delta = schema.Delta(
            schema_version=schema.SCHEMA_VERSION, seq=Seq(seq), step=Step(state.step + 1), upsert_nodes=upserts, removed_nodes=[],
            slots={}, upsert_requests=[], removed_requests=[], kv=None, events=[], counters=Counters(), contents=prints,
            **({"kv_edit": schema.KvEdit(removed=taken, added=given)} if hasattr(schema, "KvEdit") else {}),
        )  # fmt: skip
        state = copy_state(state)
        state.step = delta.step
        state.nodes.update((n.id, n) for n in upserts)
        state.contents.update(prints)
        kept = [run for run in free if run != free[0]] if free[0][1] == 1 else [(free[0][0] + 1, free[0][1] - 1), *free[1:]]
        state.kv = KvState(page_size=1, size=state.kv.size, free_runs=sorted(kept + given))
        yield delta, copy_state(state)


def measure_check(nodes: int, runs: int, steps: int) -> list[float]:
    """`check`'s seconds a frame: the check driver fed each state and the frame it came of."""
    from mcinspect.check_driver import CheckDriver
    from mcinspect.schema import Counters

    made = frames(nodes, runs, steps)
    driver = CheckDriver(names=None)
    takes_frame = "frame" in inspect.signature(driver.step).parameters
    driver.step(next(made)[1], (), counters=Counters(), restart=True)
    times = []
    for delta, state in made:
        began = time.perf_counter()
        driver.step(state, (), counters=Counters(), restart=False, **({"frame": delta} if takes_frame else {}))
        times.append(time.perf_counter() - began)
    return times


def measure_tui(nodes: int, runs: int, steps: int) -> list[float]:
    """The TUI's seconds a frame off the UI thread (tui/ingest.py): the frame's state from the
    source (a recording's, rebuilt from keyframes as a live session's are), its checks and slot
    history; the first frame is not timed (its state is the snapshot)."""
    from mcinspect.tui.findings import Findings
    from mcinspect.tui.replay_source import ReplaySource
    from mcinspect.tui.violations import checks_checker

    source = ReplaySource([frame for frame, _ in frames(nodes, runs, steps)], None, "bench")
    findings = Findings(checks_checker(lambda: None))
    try:
        from mcinspect.tui.ingest import FrameStates
    except ImportError:  # before it: every state rebuilt by the source, no delta
        take = lambda frame: (source.state_at(frame.index),)  # noqa: E731
    else:
        take = FrameStates(source).take
    times = []
    for frame in source.frames():
        began = time.perf_counter()
        findings.ingest(frame, *take(frame))
        times.append(time.perf_counter() - began)
    return times[1:]


RANK_CLOCK_SKEW = 0.5
"""Seconds rank 1's clock runs ahead of rank 0's (`last_access`: the one node field ranks may differ in)."""


def on_rank_one(frame: Any) -> Any:
    """Rank 0's state or Delta as rank 1 holds it: decoded apart (a state), its nodes stamped
    by rank 1's own clock."""
    import msgspec

    from mcinspect.schema import CacheState, Delta

    def skewed(node: Any) -> Any:
        return msgspec.structs.replace(node, last_access=node.last_access + RANK_CLOCK_SKEW)

    if isinstance(frame, Delta):
        return msgspec.structs.replace(frame, upsert_nodes=[skewed(n) for n in frame.upsert_nodes])
    other = msgspec.msgpack.decode(msgspec.msgpack.encode(frame), type=CacheState)
    other.nodes = {k: skewed(n) for k, n in other.nodes.items()}
    return other


def measure_ranks(nodes: int, runs: int, steps: int) -> list[float]:
    """`check`'s tp-agree seconds a frame of two ranks (rank_agreement.py, as `check` feeds it
    both ranks' states and frames): rank 1 is rank 0 decoded apart, its own clock stamping
    `last_access` (the one node field ranks may differ in)."""
    from mcinspect.rank_agreement import RankAgreement
    from mcinspect.schema import apply_delta, copy_state

    made = frames(nodes, runs, steps)
    first, state = next(made)
    other = on_rank_one(state)
    agreement = RankAgreement([None, None])
    takes_frame = "frame" in inspect.signature(agreement.add).parameters
    with_frame = (lambda frame: {"frame": frame}) if takes_frame else (lambda frame: {})  # noqa: E731
    agreement.add(0, state, **with_frame(first))
    agreement.add(1, copy_state(other), **with_frame(first))
    times = []
    for delta, state in made:
        theirs = on_rank_one(delta)
        apply_delta(other, theirs)
        ours_now, theirs_now = state, copy_state(other)
        began = time.perf_counter()
        found = agreement.add(0, ours_now, **with_frame(delta)) + agreement.add(1, theirs_now, **with_frame(theirs))
        times.append(time.perf_counter() - began)
        assert not found, found
    return times


def summary(times: list[float]) -> dict[str, float]:
    """ms a frame: median and worst of the frames after the first, the first."""
    return {"median": 1e3 * statistics.median(times[1:]), "worst": 1e3 * max(times[1:]), "first": 1e3 * times[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-site", help="packages to run first on the path for the 'before' column")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--sizes", default="10000:1000,100000:62000", help="nodes:free runs, comma-separated")
    parser.add_argument("--tui", action="store_true", help="time the TUI's frame (its state, checks and slot history) instead")
    parser.add_argument("--ranks", action="store_true", help="time tp-agree between two ranks' frames instead")
    parser.add_argument("--child", nargs=2, type=int, metavar=("NODES", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure = measure_tui if args.tui else measure_ranks if args.ranks else measure_check
        print(json.dumps(summary(measure(*args.child, args.steps))))
        return
    what = "the TUI's ingest" if args.tui else "tp-agree of two ranks" if args.ranks else "a checked step"
    print(
        f"ms {what}, median / worst of the frames after the first / the first ({args.steps} steps); before = {args.before_site or '(none)'}"
    )
    print(f"{'nodes':>7} {'free runs':>9} {'before':>25} {'after':>25} {'ratio':>6}")
    for size in args.sizes.split(","):
        nodes, runs = (int(x) for x in size.split(":"))
        sides = []
        for site in (args.before_site, None) if args.before_site else (None,):
            env = dict(os.environ)
            if site:
                env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
            command = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps), "--child", str(nodes), str(runs)]
            command += ["--tui"] if args.tui else ["--ranks"] if args.ranks else []
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            sides.append(json.loads(done.stdout.splitlines()[-1]))
        before, after = sides if len(sides) == 2 else [None, sides[0]]
        cell = lambda r: f"{r['median']:7.1f} / {r['worst']:6.1f} / {r['first']:6.1f}" if r else f"{'-':>25}"  # noqa: E731
        ratio = f"{before['median'] / after['median']:5.1f}x" if before else ""
        print(f"{nodes:>7} {runs:>9} {cell(before):>25} {cell(after):>25} {ratio:>6}")


if __name__ == "__main__":
    main()
