"""Fingerprint throughput of the torch path on the CPU, next to a plain per-slot `sum()` loop.

The loop reads the same bytes and does one add per element, so it is a floor-cost baseline:
the ratio says what the exact integer digest (about 20 integer ops per word) costs on top of
reading the state. GB/s counts the state bytes of the fingerprinted slots, once.

    PYTHONPATH=/tmp/dev .venv/bin/python tests/bench/bench_fingerprint.py [--slots 32]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from mcinspect_kernels.fingerprint import fingerprint_slots


def build_pool(layers: int, size: int, conv_dim: int, heads: int, head_dim: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Qwen3-Next-like shapes scaled down to CPU size: bf16 conv windows, fp32 SSM states."""
    generator = torch.Generator().manual_seed(0)
    conv = torch.randn(layers, size + 1, conv_dim, 3, generator=generator).to(torch.bfloat16)
    temporal = torch.randn(layers, size + 1, heads, head_dim, head_dim, generator=generator)
    return [conv], temporal


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Fastest of `repeats` runs in seconds (the least disturbed by the shared cores)."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--pool-size", type=int, default=64)
    parser.add_argument("--slots", type=int, default=32, help="slots fingerprinted per call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable on shared cores)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    conv, temporal = build_pool(args.layers, args.pool_size, conv_dim=1024, heads=4, head_dim=64)
    slots = torch.randperm(args.pool_size, generator=torch.Generator().manual_seed(1))[: args.slots] + 1
    tensors = [*conv, temporal]
    state_bytes = args.slots * sum(t[:, 0].numel() * t.element_size() for t in tensors)

    def per_slot_sums() -> None:
        for slot in slots.tolist():
            for t in tensors:
                t[:, slot].sum()

    digest = best_of(args.repeats, lambda: fingerprint_slots(conv, temporal, slots, backend="torch"))
    baseline = best_of(args.repeats, per_slot_sums)
    print(f"{args.slots} slots x {state_bytes / args.slots / 2**20:.2f} MiB, {torch.get_num_threads()} threads")
    print(f"{'torch fingerprint_slots':<26} {state_bytes / digest / 1e9:7.2f} GB/s  {digest * 1e3:8.1f} ms")
    print(f"{'per-slot tensor.sum() loop':<26} {state_bytes / baseline / 1e9:7.2f} GB/s  {baseline * 1e3:8.1f} ms")
    print(f"{'time ratio':<26} {digest / baseline:7.2f}x  (fingerprint / sum loop)")


if __name__ == "__main__":
    main()
