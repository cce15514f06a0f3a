"""Engine throughput of the demo workload: hooks off / hooks on, no client / hooks on with a
client streaming (goal: >= 0.99x), with fingerprint capture (goal >= 0.98x), and with T2
verification by the engine oracle.

"hooks on" captures on demand (nothing per step while nobody is subscribed). "+ live client"
streams what a TUI gets by default: captures as often as the inspector's time budget allows
(MCINSPECT_LIVE_BUDGET, 0.8% of the scheduler's time). "+ every-step client" asks for every step
(what `mcinspect record` and `check` do) from when it has connected: the steps the workload ran
before are not captured (on a fast machine a fifth of them: see its steps captured).
"+ recording" is `demo --record`: its recorder subscribes before the workload starts, so every
step is streamed and written to a file. "every step" forces that capture without a client's
own CPU use, "no fingerprints" is that without slot fingerprints, and "no track-write hooks"
without the hooks inside the forward that read what it wrote (MCINSPECT_TRACK_WRITES=off): the
difference in hook ms/step is what checking the forward's writes costs per step.

On a shared 2-core machine the engine's own processes (scheduler, detokenizer) fill both cores
and throughput varies by +-10% run to run, more than the effect measured. So each run also
reports the time its scheduler thread spent inside mcinspect's hooks (`Stats.hook_seconds`,
summed by the hook guard): its share of the workload's wall time is the inspector's direct
cost, and 1 - share the throughput ratio it implies, a figure the noise hardly moves.

T2 verification (the engine oracle's reference prefills) is off in every variant but the two
"verify" ones: at the production default budget (MCINSPECT_VERIFY_SHARE=0.05) and at the demo's
(0.5); for those the bench also prints the references a second it achieved and their share of
the workload's time.

Each variant is a separate `mcinspect demo --headless --json` process on the same seed; the
variants are interleaved round by round so machine noise hits them alike, and the median of
the rounds is compared. Prints tokens/s per variant, the ratios to hooks-off, and the frames
each client received.

`--before-site DIR`: each variant but hooks off runs twice a round, first with the packages
installed in DIR first on the path (e.g. `pip install --no-deps --target DIR` of the main
branch), then with this tree's; the table prints both, measured in the same rounds, then each
round's after / before ratio of hook ms/step (the pair ran back to back).

Run (holds the engine lock): `flock /tmp/mcinspect-engine.lock .venv/bin/python
tests/bench/bench_engine_overhead.py [--rounds 3] [--requests 200] [--only "A;B"] [--before-site DIR]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from mcinspect.client import EngineUnreachable  # noqa: E402
from mcinspect.session import Session  # noqa: E402
from mcinspect.target import Target  # noqa: E402

from engine_runs import MCINSPECT, free_port_pair  # noqa: E402  (tests/support)


def stream_until(port: int, done: threading.Event, frames: list[int], every_step: bool) -> None:
    """A client that connects as soon as the engine is up and applies every delta it gets."""
    target = Target("127.0.0.1", port)
    while not done.is_set():
        session = Session(target, timeout_s=2.0, every_step=every_step)
        try:
            session.connect()
        except EngineUnreachable:
            session.close()
            time.sleep(0.2)
            continue
        while not done.is_set():
            session.poll(0.1)
        frames.append(session.counters().frames)
        session.close()
        return


class Run(NamedTuple):
    tokens_per_s: float
    hook_share: float
    """Scheduler-thread time inside the hooks / workload wall time."""
    hook_ms_per_step: float
    frames: int
    """Frames the client received (0 without one)."""
    steps: int
    captured: int
    """Steps the engine captured (all but its unobserved ones)."""
    verified_per_s: float = 0.0
    """Reference prefills (cached and working states) a second of workload."""
    verify_share: float = 0.0
    """Their busy-time share of the workload's wall time."""


def run(variant: str, requests: int, site: str | None = None) -> Run:
    """One demo run of `variant`; `site`: a directory of packages put first on the path."""
    port = free_port_pair()
    command = [MCINSPECT, "demo", "--headless", "--json", "--requests", str(requests), "--port", str(port)]
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    if variant == "hooks off":
        command.append("--no-hooks")
    if variant.startswith("verify engine"):
        env["MCINSPECT_VERIFY_SHARE"] = "0.05" if "default" in variant else "0.5"
    else:
        command += ["--verify", "off"]
    if variant.startswith("every step"):
        env["MCINSPECT_CAPTURE"] = "every-step"
    if variant == "every step, no fingerprints":
        env["MCINSPECT_FINGERPRINT_BUDGET"] = "0"
    if variant == "every step, no track-write hooks":
        env["MCINSPECT_TRACK_WRITES"] = "off"
    recording = None
    if variant == "hooks on + recording":
        recording = tempfile.NamedTemporaryFile(suffix=".mcrec", delete=False).name
        command += ["--record", recording]
    done, frames = threading.Event(), []
    client = None
    if variant in ("hooks on + live client", "hooks on + every-step client"):
        every_step = variant == "hooks on + every-step client"
        client = threading.Thread(target=stream_until, args=(port, done, frames, every_step), daemon=True)
        client.start()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    done.set()
    if client is not None:
        client.join(10)
    if recording is not None:
        os.unlink(recording)
    if result.returncode != 0:
        raise SystemExit(f"{variant}: demo failed: {result.stderr.strip().splitlines()[-1]}")
    summary = json.loads(result.stdout)
    stats = summary["stats"] or {"hook_seconds": 0.0, "step": 1}
    verify = stats.get("verify") or {"verified": 0, "working": 0, "busy_seconds": 0.0}
    hook_seconds = summary["workload_hook_seconds"]  # not the references run after the workload
    return Run(
        summary["generated_tokens_per_s"],
        hook_seconds / summary["workload_s"],
        1000 * hook_seconds / max(stats["step"], 1),
        sum(frames),
        stats["step"],
        stats["step"] - stats.get("counters", {}).get("unobserved_steps", stats["step"]),
        (verify["verified"] + verify["working"]) / summary["workload_s"],
        verify["busy_seconds"] / summary["workload_s"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--only", help="Variants to run, separated by semicolons ('hooks off' always runs).")
    parser.add_argument("--before-site", help="Also run each variant with the packages in this directory first on the path.")
    args = parser.parse_args()
    variants = [
        "hooks off",
        "hooks on",
        "every step, no fingerprints",
        "every step, no track-write hooks",
        "every step",
        "hooks on + live client",
        "hooks on + every-step client",
        "hooks on + recording",
        "verify engine, default budget",
        "verify engine, demo budget",
    ]
    if args.only:
        wanted = {name.strip() for name in args.only.split(";")}
        unknown = wanted - set(variants)
        if unknown:
            parser.error(f"unknown variants {sorted(unknown)}; choose from {variants}")
        variants = [v for v in variants if v == "hooks off" or v in wanted]
    if args.before_site and not os.path.isdir(os.path.join(args.before_site, "mcinspect_engine_hooks")):
        parser.error(f"--before-site {args.before_site}: no mcinspect_engine_hooks package there")
    rows = [("hooks off", None)]  # (variant, site): hooks off is the same code either way
    for variant in variants[1:]:
        rows += [(variant, args.before_site)] if args.before_site else []
        rows.append((variant, None))
    runs: dict[tuple[str, str | None], list[Run]] = {row: [] for row in rows}
    for round_ in range(args.rounds):
        for variant, site in rows:
            runs[variant, site].append(result := run(variant, args.requests, site))
            print(
                f"round {round_ + 1}: {_label(variant, site, args.before_site):<42} {result.tokens_per_s:7.1f} generated tok/s, "
                f"hooks {result.hook_ms_per_step:5.2f} ms/step = {100 * result.hook_share:4.1f}% of the workload"
                + (f", {result.captured} of {result.steps} steps captured" if variant != "hooks off" else "")
                + (f", client got {result.frames} frames" if result.frames else "")
                + (f", {result.verified_per_s:.1f} references/s taking {100 * result.verify_share:.1f}%" if result.verified_per_s else ""),
                flush=True,
            )
    base = statistics.median(r.tokens_per_s for r in runs["hooks off", None])
    print(
        f"\nmedian of {args.rounds} rounds, {args.requests} requests each" + (f"; before = {args.before_site}" if args.before_site else "")
    )
    print(f"{'variant':<42} {'tok/s':>7} {'vs off':>7}   {'hook ms/step':>12} {'1 - hook share':>15}")
    for variant, site in rows:
        measured = runs[variant, site]
        median = statistics.median(r.tokens_per_s for r in measured)
        per_step = statistics.median(r.hook_ms_per_step for r in measured)
        share = statistics.median(r.hook_share for r in measured)
        print(f"{_label(variant, site, args.before_site):<42} {median:7.1f} {median / base:6.3f}x   {per_step:12.3f} {1 - share:14.3f}x")
        if variant.startswith("verify"):
            rate = statistics.median(r.verified_per_s for r in measured)
            taken = statistics.median(r.verify_share for r in measured)
            print(f"{'':<37} {rate:.1f} references/s, {100 * taken:.1f}% of the workload's time")
    if args.before_site:
        _print_paired(runs, variants[1:], args.before_site)


def _print_paired(runs: dict[tuple[str, str | None], list[Run]], variants: list[str], before_site: str) -> None:
    """After / before hook ms/step of each round: the two ran back to back, so a machine whose
    speed drifts between rounds (15% and more here) moves both alike."""
    print("\nhook ms/step after / before, round by round (median):")
    for variant in variants:
        ratios = [a.hook_ms_per_step / b.hook_ms_per_step for a, b in zip(runs[variant, None], runs[variant, before_site])]
        print(f"{variant:<42} {' '.join(f'{r:.3f}' for r in ratios)}  ({statistics.median(ratios):.3f})")


def _label(variant: str, site: str | None, before_site: str | None) -> str:
    """The variant, marked before / after when the run compares two trees."""
    if before_site is None or variant == "hooks off":
        return variant
    return f"{variant} ({'before' if site else 'after'})"


if __name__ == "__main__":
    main()
