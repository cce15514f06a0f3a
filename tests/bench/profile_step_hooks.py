"""Where the every-step stream's hook time goes: the demo workload with every step captured,
its scheduler-thread time split by section (mcinspect's step-boundary parts and each hook
body) and by the kind of step (decode, extend).

The sections are timed inside the engine's scheduler process (`step_sections/sitecustomize.py`,
put on its path): each timer adds about half a microsecond a call, so the totals run a few
percent above the bench's hook ms/step; compare sections with each other, and runs with each
other, not with `bench_engine_overhead.py`. `--before-site DIR` runs DIR's packages first on
the path too (both runs printed side by side). `--count-calls`: no timers; the function calls
(Python and C) made inside the step boundary's hook, per step of each kind.

Run (holds the engine lock): `flock /tmp/mcinspect-engine.lock .venv/bin/python
tests/bench/profile_step_hooks.py [--requests 200] [--before-site DIR] [--count-calls]`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from engine_runs import MCINSPECT, free_port_pair  # noqa: E402  (tests/support)

SECTIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_sections")
KINDS = ("decode", "extend")


def profile(requests: int, site: str | None, count_calls: bool = False) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Section totals ('section/kind' -> [calls, seconds]) and the run's summary figures."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(os.environ, STEP_SECTIONS_OUT=out, MCINSPECT_CAPTURE="every-step", STEP_SECTIONS_CALLS="1" if count_calls else "0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site, SECTIONS_DIR, env.get("PYTHONPATH")) if p)
    command = [MCINSPECT, "demo", "--headless", "--json", "--verify", "off", "--requests", str(requests), "--port", str(free_port_pair())]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    if result.returncode != 0:
        raise SystemExit(f"demo failed: {result.stderr.strip().splitlines()[-1]}")
    with open(out) as f:
        totals = json.load(f)
    os.unlink(out)
    summary = json.loads(result.stdout)
    steps = summary["stats"]["step"]
    figures = {
        "tok/s": summary["generated_tokens_per_s"],
        "hook ms/step": 1000 * summary["workload_hook_seconds"] / steps,
        "1 - share": 1 - summary["workload_hook_seconds"] / summary["workload_s"],
    }
    return totals, figures


def table(runs: list[tuple[str, dict[str, list[float]], dict[str, float]]]) -> None:
    """us per step of each kind, per section, for each run; sections by the last run's total."""
    for label, _, figures in runs:
        print(f"{label}: {figures['tok/s']:.1f} tok/s, hooks {figures['hook ms/step']:.3f} ms/step, 1 - share {figures['1 - share']:.3f}x")
    steps = [{kind: totals.get(f"Inspector.on_step/{kind}", [0, 0.0])[0] for kind in KINDS} for _, totals, _ in runs]
    print(
        "\n"
        + ", ".join(f"{label}: " + " / ".join(f"{s[kind]:.0f} {kind}" for kind in KINDS) for (label, *_), s in zip(runs, steps))
        + " steps"
    )
    header = "".join(f" {label + ' ' + kind:>16}" for label, *_ in runs for kind in KINDS)
    print(f"{'us per step of its kind':<44}{header}")
    names = {key.rsplit("/", 1)[0] for _, totals, _ in runs for key in totals} - {"Inspector.on_step"}
    last = runs[-1][1]

    def weight(name: str) -> float:
        return -sum(last.get(f"{name}/{kind}", [0, 0.0])[1] for kind in KINDS)

    for name in sorted(names, key=weight):
        per_step = [
            1e6 * totals.get(f"{name}/{kind}", [0, 0.0])[1] / max(counts[kind], 1)
            for (_, totals, _), counts in zip(runs, steps)
            for kind in KINDS
        ]
        if max(per_step) >= 0.5:
            print(f"{name[:44]:<44}{''.join(f' {us:16.1f}' for us in per_step)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--before-site", help="Also profile with the packages in this directory first on the path.")
    parser.add_argument("--count-calls", action="store_true", help="Count the step hook's function calls instead of timing sections.")
    args = parser.parse_args()
    if args.count_calls:
        totals, _ = profile(args.requests, None, count_calls=True)
        for kind in KINDS:
            steps = totals.get(f"Inspector.on_step/{kind}", [0, 0.0])[0]
            print(f"{kind}: {totals.get(f'calls/{kind}', [0])[0] / max(steps, 1):.0f} calls a step boundary ({steps:.0f} steps)")
        return
    runs = []
    if args.before_site:
        runs.append(("before", *profile(args.requests, args.before_site)))
    runs.append(("after" if args.before_site else "this tree", *profile(args.requests, None)))
    table(runs)


if __name__ == "__main__":
    main()
