"""Engine throughput of the demo workload while a client floods the request port (goal: >= 0.95x).

Variants, each a separate `mcinspect demo --headless --json` process on the same seed,
interleaved round by round (the median of the rounds is compared):

- no flood: hooks on, nobody asks anything;
- decoy flood: the same flooding process, its requests answered by a decoy ROUTER of its own
  (what the flood costs the machine's CPUs, with nothing asked of the engine);
- snapshot flood: GetSnapshot back to back from one client, 8 in flight (the issue's attack ran
  ~2,100 a second and cut generation to 0.43-0.57x);
- 16-client flood: the same from 16 connections (each its own rate bucket).

The flooder is its own process at nice 19 (its GIL is not the engine's, and its CPU is what
the engine leaves). Prints tokens/s per variant, the ratios to "no flood" and to "decoy flood",
and how many requests the flooder sent and got answered or refused.

On a shared 2-core machine throughput moves by 2-5x run to run with the other tenants' load,
far more than the effect measured. So each run also reports what the inspector itself took
from the scheduler: its hooks' time on the scheduler thread (`Stats.hook_seconds`) plus the
request thread's CPU time, during which it held the GIL the scheduler needs
(`Stats.request_seconds`). 1 - their share of the workload's wall time is the throughput ratio
the inspector's work implies, a figure the noise hardly moves.

Run: `flock /tmp/mcinspect-engine.lock .venv/bin/python tests/bench/bench_request_flood.py [--rounds 3] [--requests 120]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from typing import NamedTuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from engine_runs import MCINSPECT, free_port_pair  # noqa: E402  (tests/support)

FLOODER = textwrap.dedent(
    """
    import json, os, signal, sys, time, zmq
    from mcinspect.client import client_socket
    os.nice(19)  # the flood's own CPU is not the inspector's cost: it gets what the engine leaves
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    from mcinspect.schema import SCHEMA_VERSION, ErrorReply, GetSnapshot, Hello, decode_reply, encoder
    port, clients, decoy, seconds = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "decoy", float(sys.argv[4])
    context = zmq.Context.instance()
    if decoy:  # answer our own flood: the same client work, nothing asked of the engine
        server = context.socket(zmq.ROUTER)
        port = server.bind_to_random_port("tcp://127.0.0.1")
        reply = encoder.encode(ErrorReply(schema_version=SCHEMA_VERSION, reason="decoy"))
    # Wait for the engine (its key file appears when its sockets are bound).
    probe = client_socket(context, zmq.DEALER, "127.0.0.1", port, "")
    probe.connect(f"tcp://127.0.0.1:{port}")
    if not decoy:
        while True:
            probe.send(encoder.encode(Hello(schema_version=SCHEMA_VERSION)))
            if probe.poll(1000):
                probe.recv()
                break
            probe.close()
            probe = client_socket(context, zmq.DEALER, "127.0.0.1", port, "")
            probe.connect(f"tcp://127.0.0.1:{port}")
    probe.close()
    sockets = []
    for _ in range(clients):
        s = client_socket(context, zmq.DEALER, "127.0.0.1", port, "")
        s.connect(f"tcp://127.0.0.1:{port}")
        sockets.append(s)
    ask = encoder.encode(GetSnapshot(schema_version=SCHEMA_VERSION))
    poller = zmq.Poller()
    for s in sockets:
        poller.register(s, zmq.POLLIN)
    if decoy:
        poller.register(server, zmq.POLLIN)
    in_flight = {s: 0 for s in sockets}
    counts = {"sent": 0, "snapshots": 0, "refused": 0}
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for s in sockets:
                while in_flight[s] < 8:
                    s.send(ask)
                    in_flight[s] += 1
                    counts["sent"] += 1
            for s, _ in poller.poll(50):
                if decoy and s is server:
                    while server.poll(0):
                        identity, _ = server.recv_multipart()
                        server.send_multipart([identity, reply])
                    continue
                while s.poll(0):
                    answer = decode_reply(s.recv())
                    in_flight[s] -= 1
                    counts["refused" if isinstance(answer, ErrorReply) else "snapshots"] += 1
    finally:
        print(json.dumps(counts), flush=True)
    """
)


class Run(NamedTuple):
    tokens_per_s: float
    hook_share: float
    """Scheduler-thread time in the hooks / workload wall time."""
    request_share: float
    """Request-thread CPU time (GIL held) / workload wall time."""
    flood: dict[str, int]


def run(variant: str, requests: int) -> Run:
    port = free_port_pair()
    # T2 verification off: its references are measured in bench_engine_overhead, not here
    command = [MCINSPECT, "demo", "--headless", "--json", "--requests", str(requests), "--port", str(port), "--verify", "off"]
    flooder = None
    if variant != "no flood":
        clients = "16" if variant.startswith("16") else "1"
        mode = "decoy" if variant.startswith("decoy") else "engine"
        flooder = subprocess.Popen(
            [sys.executable, "-c", FLOODER, str(port), clients, mode, "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    flood: dict[str, int] = {}
    if flooder is not None:
        flooder.terminate()
        out, err = flooder.communicate(timeout=30)
        flood = json.loads(out) if out.strip() else {"error": err.strip().splitlines()[-1] if err.strip() else "killed"}  # type: ignore[dict-item]
    if result.returncode != 0:
        raise SystemExit(f"{variant}: demo failed: {result.stderr.strip().splitlines()[-1]}")
    summary = json.loads(result.stdout)
    stats, wall = summary["stats"], summary["workload_s"]
    return Run(summary["generated_tokens_per_s"], summary["workload_hook_seconds"] / wall, stats["request_seconds"] / wall, flood)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=120)
    args = parser.parse_args()
    variants = ["no flood", "decoy flood", "snapshot flood", "16-client flood"]
    runs: dict[str, list[Run]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        for variant in variants:
            began = time.monotonic()
            runs[variant].append(result := run(variant, args.requests))
            print(
                f"round {round_ + 1}: {variant:<16} {result.tokens_per_s:7.1f} generated tok/s, hooks {100 * result.hook_share:4.2f}%, "
                f"requests {100 * result.request_share:4.2f}% of the workload ({time.monotonic() - began:.0f} s) {result.flood or ''}",
                flush=True,
            )
    base = statistics.median(r.tokens_per_s for r in runs["no flood"])
    decoy = statistics.median(r.tokens_per_s for r in runs["decoy flood"])
    print(f"\nmedian of {args.rounds} rounds, {args.requests} requests each")
    print(f"{'variant':<16} {'tok/s':>7} {'vs no flood':>12} {'vs decoy':>9} {'hooks':>7} {'requests':>9} {'implied':>8}")
    for variant in variants:
        median = statistics.median(r.tokens_per_s for r in runs[variant])
        hooks = statistics.median(r.hook_share for r in runs[variant])
        asked = statistics.median(r.request_share for r in runs[variant])
        print(
            f"{variant:<16} {median:7.1f} {median / base:11.3f}x {median / decoy:8.3f}x {100 * hooks:6.2f}% {100 * asked:8.2f}% "
            f"{1 - hooks - asked:7.3f}x"
        )


if __name__ == "__main__":
    main()
