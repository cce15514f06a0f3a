"""The request read of a decode step with the CPU's caches cold (as after a forward) vs warm.

Four requests decode a token each per step on sglang 0.5.23's real cache classes (CPU tensors,
tests/support/cpu_cache.py, moved by sglang's own calls: cache_driver.py). Two RequestReaders
follow them in lockstep: after each step a sweep of SWEEP_BYTES and some unrelated Python
(sorting, JSON) evicts what it can, then reader A reads (cold), then reader B does the same
read right after it (its code and sglang's objects warm). Prints the medians: in the engine a
step's hooks run right after the forward, so their cost is the cold one.

Run: `.venv/bin/python tests/bench/bench_cold_read.py [--steps 150]`
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from mcinspect_engine_hooks.cpu_engine import patches  # noqa: E402

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import numpy as np  # noqa: E402
import torch  # noqa: E402
from cache_driver import Driver  # noqa: E402

from mcinspect_engine_hooks.pools_0523 import held_requests, session_kv  # noqa: E402
from mcinspect_engine_hooks.request_reader import RequestReader  # noqa: E402

import cpu_cache  # noqa: E402

SWEEP_BYTES = 2 << 20
REQUESTS = 4
PROMPT = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="decode steps (at most 256 - 40: the stand-in's row length)")
    args = parser.parse_args()
    sweep = np.ones(SWEEP_BYTES // 8, dtype=np.int64)
    words = [str(random.random()) for _ in range(20_000)]

    def evict() -> None:
        np.add(sweep, 1, out=sweep)
        sorted(words)
        json.dumps({word: i for i, word in enumerate(words[:5000])})

    scheduler = cpu_cache.build_cache(mamba_slots=40, kv_size=8192)
    with torch.inference_mode():
        drive = Driver(scheduler)
        reqs = drive.decoding(REQUESTS, PROMPT)
        cold_reader, warm_reader = RequestReader(scheduler.req_to_token_pool), RequestReader(scheduler.req_to_token_pool)

        def read(reader: RequestReader) -> float:
            began = time.perf_counter()
            reader.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
            return time.perf_counter() - began

        read(cold_reader), read(warm_reader)
        cold, warm = [], []
        for step in range(args.steps):
            for req in reqs:
                drive.decode(req, [step % 50])
            evict()
            cold.append(read(cold_reader))
            warm.append(read(warm_reader))
    print(
        f"{REQUESTS} requests, a decode token each, {args.steps} steps: held_requests + RequestReader.read "
        f"cold {1e6 * statistics.median(cold):.1f} us, warm {1e6 * statistics.median(warm):.1f} us (medians; "
        f"cold / warm {statistics.median(cold) / statistics.median(warm):.1f}x)"
    )


if __name__ == "__main__":
    main()
