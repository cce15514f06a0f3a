"""Engine throughput of the demo workload: hooks off / hooks on, no client / hooks on with a
client streaming every delta (goal: >= 0.99x), and with fingerprint capture (goal >= 0.98x).

"hooks on" captures on demand (nothing per step while nobody is subscribed); "every step"
forces the per-step capture a subscribed client causes, without the client's own CPU use, and
"no fingerprints" is that without slot fingerprints.

Each variant is a separate `mcinspect demo --headless --json` process on the same seed; the
variants are interleaved round by round so machine noise hits them alike, and the median of
the rounds is compared. Prints tokens/s per variant and the ratios to hooks-off.

Run: `.venv/bin/python tests/bench/bench_engine_overhead.py [--rounds 3] [--requests 200]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from engine_runs import MCINSPECT, free_port_pair  # noqa: E402  (tests/support)

from mcinspect.client import EngineUnreachable  # noqa: E402
from mcinspect.session import Session  # noqa: E402
from mcinspect.target import Target  # noqa: E402


def stream_until(port: int, done: threading.Event, frames: list[int]) -> None:
    """A client that connects as soon as the engine is up and applies every delta."""
    target = Target("127.0.0.1", port)
    while not done.is_set():
        session = Session(target, timeout_s=2.0)
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


def run(variant: str, requests: int) -> float:
    port = free_port_pair()
    command = [MCINSPECT, "demo", "--headless", "--json", "--requests", str(requests), "--port", str(port)]
    env = dict(os.environ)
    if variant == "hooks off":
        command.append("--no-hooks")
    if variant.startswith("every step"):
        env["MCINSPECT_CAPTURE"] = "every-step"
    if variant == "every step, no fingerprints":
        env["MCINSPECT_FINGERPRINT_BUDGET"] = "0"
    done, frames = threading.Event(), []
    client = None
    if variant == "hooks on + client":
        client = threading.Thread(target=stream_until, args=(port, done, frames), daemon=True)
        client.start()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
    done.set()
    if client is not None:
        client.join(10)
    if result.returncode != 0:
        raise SystemExit(f"{variant}: demo failed: {result.stderr.strip().splitlines()[-1]}")
    summary = json.loads(result.stdout)
    return summary["generated_tokens_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    variants = ["hooks off", "hooks on", "every step, no fingerprints", "every step", "hooks on + client"]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        for variant in variants:
            rates[variant].append(run(variant, args.requests))
            print(f"round {round_ + 1}: {variant:<26} {rates[variant][-1]:8.1f} generated tok/s", flush=True)
    base = statistics.median(rates["hooks off"])
    print(f"\nmedian of {args.rounds} rounds, {args.requests} requests each")
    for variant in variants:
        median = statistics.median(rates[variant])
        print(f"{variant:<26} {median:8.1f} tok/s   {median / base:6.3f}x hooks off")


if __name__ == "__main__":
    main()
