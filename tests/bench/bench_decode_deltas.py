"""What the every-step stream sends for decoding requests: their growths (lengths and the KV
runs added: `RequestGrowth`) against their whole records, as it sent them before schema 3.

N requests decode one token each a step on sglang 0.5.23's real cache classes (CPU tensors,
tests/support/cpu_cache.py, moved by sglang's own calls: cache_driver.py); each step a
RequestReader reads them as the step boundary does. At page size 1 each decode step takes a
token per row out of one allocation, so no row's tokens are contiguous: a record's `kv_runs`
gains a run per token, and whole records made every step's delta grow with the running
requests' lengths. Prints, every 50 steps, a step's encoded bytes and encoding time both ways,
measured on the same reads (median of the last 10 steps, and the worst of the steps encoded so
far: only those 10 of every 50, the whole records' lists being garbage the others do not make),
and the reader's time (median of the last 10 steps, worst of all so far), on the host path and
on the path a GPU engine's tensors take (one device copy a read: here on the same CPU tensors,
so its Python and dispatch cost without a device's copy).

Run: `.venv/bin/python tests/bench/bench_decode_deltas.py [--requests 64] [--steps 200] [--page-size 1]`
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from mcinspect_engine_hooks.cpu_engine import patches  # noqa: E402

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import msgspec  # noqa: E402
import torch  # noqa: E402
from cache_driver import Driver  # noqa: E402

from mcinspect_engine_hooks import growing_runs  # noqa: E402
from mcinspect_engine_hooks.pools_0523 import held_requests, session_kv  # noqa: E402
from mcinspect_engine_hooks.request_reader import RequestReader  # noqa: E402

import cpu_cache  # noqa: E402

PROMPT = 40


class DevicePathReader(RequestReader):
    """The reader as off the host (its one-copy path), on these host tensors."""

    def _host_ints(self, plans: Any) -> None:
        return None


def timed_encode(encoder: msgspec.msgpack.Encoder, value: object) -> tuple[int, float]:
    began = time.perf_counter()
    size = len(encoder.encode(value))
    return size, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200, help="decode steps")
    parser.add_argument("--page-size", type=int, default=1)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    n, page = args.requests, args.page_size
    tokens = n * (PROMPT + args.steps + 2 * page) + 4 * page
    scheduler = cpu_cache.build_cache(
        mamba_slots=3 * n + 8, kv_size=tokens, max_requests=n, page_size=page, max_context_len=PROMPT + args.steps + 2 * page
    )
    encoder = growing_runs.encoder()  # the engine's: records' runs are GrowingRuns
    print(f"{n} requests decoding, page size {page}: per step (median of the last 10 steps / worst so far)")
    print(
        f"{'step':>5} {'KV runs':>8} {'whole records':>24} {'growths':>22} {'bytes':>7} {'time':>7} {'reader us':>10} {'device path':>11}"
    )
    with torch.inference_mode():
        drive = Driver(scheduler)
        reqs = []
        for i in range(n):
            req = drive.admit([100 + (7 * i + j) % 400 for j in range(PROMPT)], max_new_tokens=4000)
            drive.prefill(req, PROMPT)
            reqs.append(req)
        reader = RequestReader(scheduler.req_to_token_pool)
        reader.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
        device = DevicePathReader(scheduler.req_to_token_pool)
        device.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
        whole: list[tuple[int, float]] = []
        grown: list[tuple[int, float]] = []
        reads: list[float] = []
        device_reads: list[float] = []
        for step in range(1, args.steps + 1):
            for req in reqs:
                drive.decode(req, [step % 50])
            began = time.perf_counter()
            read = reader.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
            reads.append(time.perf_counter() - began)
            began = time.perf_counter()
            device.read(held_requests(scheduler), session_kv(scheduler.tree_cache))
            device_reads.append(time.perf_counter() - began)
            assert not read.upserts and len(read.grown) == n, "a decode step's records go out as growths"
            checkpoint = step % 50 == 0 or step == args.steps
            if not checkpoint and (step % 50 < 40 and args.steps - step >= 10):
                continue  # whole records only for the steps a checkpoint prints (their lists are garbage)
            # The same step as sent before schema 3: each grown request's whole record.
            whole.append(timed_encode(encoder, [read.records[g.rid] for g in read.grown]))
            grown.append(timed_encode(encoder, read.grown))
            if checkpoint:
                runs = sum(len(record.kv_runs) for record in read.records.values())
                cells = []
                for series in (whole, grown):
                    last = series[-10:]
                    size = statistics.median(s for s, _ in last)
                    cells.append(
                        f"{size / 1024:7.1f} KB {1e6 * statistics.median(t for _, t in last):6.0f}/{1e6 * max(t for _, t in series):5.0f} us"
                    )
                ratio_bytes = statistics.median(s for s, _ in whole[-10:]) / statistics.median(s for s, _ in grown[-10:])
                ratio_time = statistics.median(t for _, t in whole[-10:]) / statistics.median(t for _, t in grown[-10:])
                print(
                    f"{step:5d} {runs:8d} {cells[0]:>24} {cells[1]:>22} {ratio_bytes:6.1f}x {ratio_time:6.1f}x "
                    f"{1e6 * statistics.median(reads[-10:]):6.0f}/{1e6 * max(reads):4.0f} "
                    f"{1e6 * statistics.median(device_reads[-10:]):6.0f}/{1e6 * max(device_reads):4.0f}"
                )


if __name__ == "__main__":
    main()
