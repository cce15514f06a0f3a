"""`mcinspect check`'s time a step on a large tree: what a client checking a production engine's
every-step stream spends on each frame, against the engine's step (20-50 ms).

A tree of N nodes (tests/support/record_states.random_state; a fingerprint for each cached
state) beside a fragmented KV free list of R runs; then `--steps` steps, each changing a few
nodes, fingerprinting two cached states again, allocating a few tokens and freeing a few (so
kv-pages looks for nodes holding the freed ones at every step), fed to the one check
driver (check_driver.py) as `check` feeds it: the state and the frame it came of. Each size runs
in a child process twice, first with `--before-site DIR`'s packages first on the path (e.g.
main's: `pip install --no-deps --target DIR .` of it), then with this tree's; prints the median
and worst ms a step after the first, the first (where a chain builds what it then hands from
view to view), and the before / after ratio of the medians.

Run: `.venv/bin/python tests/bench/bench_check_step.py --before-site DIR [--steps 30] [--sizes 10000:1000,100000:62000]`
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

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))


def measure(nodes: int, runs: int, steps: int) -> dict[str, float]:
    """In this process (whichever mcinspect is first on the path): ms a step, median and worst."""
    import msgspec

    from mcinspect import schema
    from mcinspect.check_driver import CheckDriver
    from mcinspect.schema import Counters, KvState, NodeId, Seq, SlotContent, Step, copy_state

    from record_states import random_state

    rng = random.Random(0)
    state = random_state(nodes, 0, 0.5)
    base = 10 * nodes + 1_000_000  # the free list lies apart from the nodes' KV (random_state's)
    state.kv = KvState(page_size=1, size=base + 10 * runs + 10, free_runs=[(base + 10 * i, 3) for i in range(runs)])
    state.contents = {
        slot: SlotContent(slot, rng.getrandbits(63), 0, False, Step(0)) for slot in state.slots
    }  # every cached state's fingerprint
    cached = list(state.contents)
    driver = CheckDriver(names=None)
    takes_frame = "frame" in inspect.signature(driver.step).parameters
    driver.step(copy_state(state), (), counters=Counters(), restart=True)
    times = []
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
        frame = copy_state(state)
        began = time.perf_counter()
        driver.step(frame, (), counters=Counters(), restart=False, **({"frame": delta} if takes_frame else {}))
        times.append(time.perf_counter() - began)
    return {"median": 1e3 * statistics.median(times), "worst": 1e3 * max(times[1:]), "first": 1e3 * times[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-site", help="packages to run first on the path for the 'before' column")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--sizes", default="10000:1000,100000:62000", help="nodes:free runs, comma-separated")
    parser.add_argument("--child", nargs=2, type=int, metavar=("NODES", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child, args.steps)))
        return
    print(
        f"ms a checked step, median / worst of the steps after the first / the first ({args.steps} steps); before = {args.before_site or '(none)'}"
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
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            sides.append(json.loads(done.stdout.splitlines()[-1]))
        before, after = sides if len(sides) == 2 else [None, sides[0]]
        cell = lambda r: f"{r['median']:7.1f} / {r['worst']:6.1f} / {r['first']:6.1f}" if r else f"{'-':>25}"  # noqa: E731
        ratio = f"{before['median'] / after['median']:5.1f}x" if before else ""
        print(f"{nodes:>7} {runs:>9} {cell(before):>25} {cell(after):>25} {ratio:>6}")


if __name__ == "__main__":
    main()
