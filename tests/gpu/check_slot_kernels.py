"""GPU check of the slot kernels: Triton == torch on a realistic mamba pool, and bandwidth.

Self-contained: needs torch and Triton only (no sglang, no installed mcinspect); it loads this
checkout's kernels/ by path as `mcinspect_kernels`. The pool has Qwen3-Next-80B's linear
attention shapes at the given tensor-parallel size (48 layers by default, bf16 conv windows
[8192/tp, 3], fp32 SSM states [32/tp, 128, 128]) with planted cases: a copied slot, a one-bit
flip, NaN/Inf, a zeroed and a -0.0 slot. It checks fingerprints, NaN/Inf counts and zero flags
bit-exactly and distances (max_abs exactly, rel_l2 to 1e-5), then times the fingerprint over
every slot, at its launch shape and at the one before, against the device's peak and against
torch's own `.sum()` of the same bytes, and single calls as the engine makes them (1 slot, the
device budget's, the host budget's), as now and as before (ids on the device, no kept table).
Exits 1 on any mismatch. About 50 GiB of GPU memory at the defaults; well under 60 s.

    python tests/gpu/check_slot_kernels.py [--peak-tbps 4.8] [--tp 2] [--pool-size 1024]
    python tests/gpu/check_slot_kernels.py --interpret   # tiny pool on the CPU (Triton interpreter)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]

PREVIOUS_SHAPE = (1024, 8)
"""The fingerprint kernel's launch shape before FINGERPRINT_SHAPE, timed beside it."""
COPY, FLIP, NONFINITE, ZEROED, NEG_ZERO = 7, 9, 11, 13, 14
"""Planted slots: COPY holds slot 3's state, FLIP slot 3's with one bit flipped, NONFINITE
3 NaN + 1 Inf, ZEROED +0.0 everywhere, NEG_ZERO -0.0 everywhere."""


def load_kernels() -> tuple[ModuleType, ModuleType]:
    """kernels/ as the package `mcinspect_kernels` (never `kernels`: that name is Hugging
    Face's), from this checkout even when another copy is installed."""
    spec = importlib.util.spec_from_file_location(
        "mcinspect_kernels", REPO / "kernels" / "__init__.py", submodule_search_locations=[str(REPO / "kernels")]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["mcinspect_kernels"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("mcinspect_kernels.fingerprint"), importlib.import_module("mcinspect_kernels.state_distance")


def build_pool(torch, args: argparse.Namespace, device: str):
    """Random states in sglang's layout, slot 0 zero, planted slots as documented above."""
    generator = torch.Generator(device=device).manual_seed(0)
    shape = (args.layers, args.pool_size + 1)
    conv = torch.randn(*shape, args.conv_dim // args.tp, 3, generator=generator, device=device).to(torch.bfloat16)
    temporal = torch.randn(*shape, args.heads // args.tp, args.head_dim, args.head_dim, generator=generator, device=device)
    for t in (conv, temporal):
        t[:, 0] = 0
        t[:, COPY] = t[:, 3]
        t[:, FLIP] = t[:, 3]
        t[:, ZEROED] = 0.0
        t[:, NEG_ZERO] = -0.0
    temporal.view(torch.int32)[-1, FLIP, -1, -1, -1] ^= 1  # the lowest mantissa bit
    conv[0, NONFINITE, 0, :] = float("nan")
    temporal[-1, NONFINITE, 0, 0, 0] = float("-inf")
    return [conv], temporal


def timed(torch, fn: Callable[[], object], repeats: int) -> float:
    """Best of `repeats` CUDA-event-timed runs, in seconds, after one untimed run (compile)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def same(torch, a, b) -> bool:
    """Exactly equal, NaN matching NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


class Checks:
    """Prints each check as it runs and remembers the failures."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    def expect(self, ok: bool, what: str) -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failures.append(what)


def check_fingerprints(torch, fingerprint: ModuleType, conv, temporal, others, checks: Checks) -> None:
    every = torch.arange(1, temporal.shape[1], device=temporal.device)
    full = fingerprint.fingerprint_slots(conv, temporal, every, backend="triton")
    planted = [3, COPY, FLIP, NONFINITE, ZEROED, NEG_ZERO]
    subset = torch.cat([torch.tensor(planted, device=temporal.device), others])
    want = fingerprint.fingerprint_slots(conv, temporal, subset, backend="torch")
    got = fingerprint.fingerprint_slots(conv, temporal, subset, backend="triton")
    checks.expect(all(same(torch, a, b) for a, b in zip(want, got)), f"fingerprints: triton == torch on {subset.numel()} slots")
    checks.expect(all(same(torch, a[subset - 1], b) for a, b in zip(full, got)), "fingerprints: all-slot launch == subset launch")
    again = fingerprint.fingerprint_slots(conv, temporal, every, backend="triton")
    checks.expect(all(torch.equal(a, b) for a, b in zip(full, again)), "fingerprints: deterministic across runs")
    shape, fingerprint.FINGERPRINT_SHAPE = fingerprint.FINGERPRINT_SHAPE, PREVIOUS_SHAPE
    previous = fingerprint.fingerprint_slots(conv, temporal, every, backend="triton")
    fingerprint.FINGERPRINT_SHAPE = shape
    checks.expect(all(torch.equal(a, b) for a, b in zip(full, previous)), f"fingerprints: the same at launch shape {PREVIOUS_SHAPE}")
    host_ids = fingerprint.fingerprint_slots(conv, temporal, subset.cpu(), backend="triton")
    checks.expect(all(same(torch, a, b) for a, b in zip(got, host_ids)), "fingerprints: slot ids from the host == on the device")
    fp = dict(zip(planted, got.fingerprint.tolist()))
    checks.expect(fp[3] == fp[COPY] != fp[FLIP], "copy -> same fingerprint; one flipped bit -> different")
    checks.expect(got.nonfinite.tolist()[: len(planted)] == [0, 0, 0, 4, 0, 0], "NaN/Inf counted: 3 NaN + 1 Inf")
    zero_flags = got.all_zero.tolist()[: len(planted)] == [False] * 4 + [True, True]
    checks.expect(zero_flags and fp[ZEROED] != fp[NEG_ZERO], "zero flags (-0.0 is zero, with its own fingerprint)")


def check_distances(torch, distance: ModuleType, conv, temporal, others, checks: Checks) -> None:
    device = temporal.device
    a = torch.cat([torch.tensor([3, 3, ZEROED, NONFINITE], device=device), others[:12]])
    b = torch.cat([torch.tensor([COPY, FLIP, NEG_ZERO, 3], device=device), others.flip(0)[:12]])
    refs = [t.index_select(1, b).float() * 1.001 for t in [*conv, temporal]]
    for what, compute in {
        "state_distance": lambda backend: distance.state_distance(conv, temporal, a, b, backend=backend),
        "state_distance_to": lambda backend: distance.state_distance_to(conv, temporal, a, refs[:-1], refs[-1], backend=backend),
    }.items():
        want, got = compute("torch"), compute("triton")
        rel_ok = torch.allclose(got.rel_l2, want.rel_l2, rtol=1e-5, atol=0, equal_nan=True)
        checks.expect(same(torch, got.max_abs, want.max_abs) and rel_ok, f"{what}: max_abs exact, rel_l2 within 1e-5, {a.numel()} pairs")
        if what == "state_distance":
            exact = got.max_abs[[0, 2]].tolist() == [0.0, 0.0] and 0 < got.rel_l2[1] < 1e-3
            checks.expect(exact, "copy and +-0 at distance 0, one flipped bit tiny but not 0")


def wall(torch, fn: Callable[[], object], repeats: int) -> float:
    """Best of `repeats` host-timed runs of `fn` (which ends in a sync), in seconds, after one
    untimed run: a call as the engine's scheduler thread feels it."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def measure(torch, fingerprint: ModuleType, distance: ModuleType, conv, temporal, args: argparse.Namespace) -> None:
    """Fingerprint of every slot at the kernel's launch shape and at the one before it, torch's
    .sum() of the same bytes, distances of 256 pairs; then single calls as the engine makes them."""
    tensors = [*conv, temporal]
    every = torch.arange(1, temporal.shape[1], device="cuda")
    read = sum(t[:, 1:].numel() * t.element_size() for t in tensors)
    seconds = timed(torch, lambda: fingerprint.fingerprint_slots(conv, temporal, every, backend="triton"), args.repeats)
    shape, fingerprint.FINGERPRINT_SHAPE = fingerprint.FINGERPRINT_SHAPE, PREVIOUS_SHAPE
    before = timed(torch, lambda: fingerprint.fingerprint_slots(conv, temporal, every, backend="triton"), args.repeats)
    fingerprint.FINGERPRINT_SHAPE = shape
    summed = timed(torch, lambda: [t[:, 1:].sum(dtype=torch.float32) for t in tensors], args.repeats)
    a, b = (torch.randperm(every.numel(), device="cuda")[:256] + 1 for _ in range(2))
    pairs = timed(torch, lambda: distance.state_distance(conv, temporal, a, b, backend="triton"), args.repeats)
    pair_bytes = 2 * read / every.numel() * a.numel()
    for label, nbytes, secs in [
        (f"fingerprint_slots, {every.numel()} slots", read, seconds),
        (f"  the same at {PREVIOUS_SHAPE[0]} x {PREVIOUS_SHAPE[1]} (before)", read, before),
        ("torch .sum() of the same bytes", read, summed),
        (f"state_distance, {a.numel()} pairs", pair_bytes, pairs),
    ]:
        print(f"{label:<40} {nbytes / secs / 1e9:8.1f} GB/s {nbytes / secs / 1e12 / args.peak_tbps:6.1%} of peak {secs * 1e3:8.2f} ms")
    print(f"{'before / after':<40} {before / seconds:8.2f}x")
    slot_bytes = read / every.numel()
    budget = max(1, int(args.budget_mib * 2**20 // slot_bytes))
    print("one call as engine_hooks/contents.py makes it (slot ids from the host, results back in one copy),")
    print("and as it made it before (ids on the device: a sync for the bounds check; the chunk table rebuilt):")
    for count, what in [
        (1, "1 slot"),
        (budget, f"{budget} slots (the {args.budget_mib} MiB default budget)"),
        (256, "256 slots (the host budget)"),
    ]:
        ids = every[:count]

        def now(ids=ids.cpu()) -> object:
            result = fingerprint.fingerprint_slots(conv, temporal, ids, backend="triton")
            return torch.stack([result.fingerprint, result.nonfinite, result.all_zero.long()]).tolist()

        def old(ids=ids) -> object:
            fingerprint._fingerprint_chunks.cache_clear()
            result = fingerprint.fingerprint_slots(conv, temporal, ids, backend="triton")
            return result.fingerprint.tolist(), result.nonfinite.tolist(), result.all_zero.tolist()

        after_s, before_s = wall(torch, now, args.repeats), wall(torch, old, args.repeats)
        print(f"  {what:<38} {after_s * 1e3:8.3f} ms, before {before_s * 1e3:8.3f} ms ({before_s / after_s:.2f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-tbps", type=float, default=4.8, help="device memory bandwidth, TB/s (H200: 4.8)")
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--pool-size", type=int, default=1024)
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size the per-rank shapes assume")
    parser.add_argument("--reference-slots", type=int, default=32, help="random slots also fingerprinted by the torch path")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget-mib", type=int, default=512, help="engine_hooks/contents.py DEVICE_BUDGET_BYTES, in MiB")
    parser.add_argument("--interpret", action="store_true", help="tiny pool on the CPU under the Triton interpreter, no timings")
    args = parser.parse_args()
    args.conv_dim, args.heads, args.head_dim = 8192, 32, 128
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # must precede the first import of triton
        args.layers, args.pool_size, args.conv_dim, args.heads, args.head_dim, args.tp = 2, 16, 64, 2, 8, 1
    import torch

    fingerprint, distance = load_kernels()
    if not args.interpret and not torch.cuda.is_available():
        print("no CUDA device (use --interpret for the CPU smoke run)")
        return 2
    device = "cpu" if args.interpret else "cuda"
    conv, temporal = build_pool(torch, args, device)
    slot_bytes = sum(t[:, 0].numel() * t.element_size() for t in [*conv, temporal])
    name = "CPU, Triton interpreter" if args.interpret else torch.cuda.get_device_name()
    print(f"{name}: {args.layers} layers, {args.pool_size} slots, {slot_bytes / 2**20:.2f} MiB/slot, "
          f"conv {tuple(conv[0].shape)} {conv[0].dtype}, temporal {tuple(temporal.shape)} {temporal.dtype}")  # fmt: skip
    checks = Checks()
    others = torch.randperm(args.pool_size, device=device)[: args.reference_slots] + 1
    check_fingerprints(torch, fingerprint, conv, temporal, others, checks)
    check_distances(torch, distance, conv, temporal, others, checks)
    if not args.interpret:  # interpreted timings would mean nothing
        measure(torch, fingerprint, distance, conv, temporal, args)
    print(f"FAIL: {len(checks.failures)} check(s)" if checks.failures else "PASS")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
