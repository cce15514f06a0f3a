"""GPU check of the engine hooks' device paths: what the inspector does with a pool or index
tensors off the host gives exactly what it gives on the host.

The engine hooks read the host through numpy views and fold host pools in numpy; on a GPU the
same captures go through other code (fingerprints by the Triton kernel with slot ids sent from
the host, index tensors gathered in one device copy). This runs both on the same data, one copy
on the host and one on the device, and compares:

- `ContentCapture` (engine_hooks/contents.py) over a few steps of a small pool: the slots that
  become stable, an in-place write to a cached state found at the next recheck, a slot that
  changes owner dropped; its default budget off the host;
- `tensor_runs`: `kept` (a copy the later writes do not reach), `ints_of_many` over mixed
  dtypes, ints and absent values, `runs_of_many`, `free_token_runs`;
- on the device only: a fingerprint call with device slot ids (the copy-on-write capture's) does
  not sync once the pool's chunk table is kept, and an id out of range gives nonfinite -1.

Needs torch, Triton, numpy and msgspec (no sglang): it imports this checkout's mcinspect,
engine_hooks and kernels under their installed names through links in a temporary directory.
Exits 1 on any difference. `--device cpu` runs the device side on the host with the numpy fold
and the mirror turned off (the torch path): what CI runs (tests/unit/test_slot_kernels.py).

    python tests/gpu/check_device_paths.py [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_slot_kernels import Checks  # noqa: E402  (beside this script)


def import_checkout() -> None:
    """mcinspect, mcinspect_engine_hooks and mcinspect_kernels from this checkout."""
    links = tempfile.mkdtemp(prefix="mcinspect-device-")
    for name, folder in [("mcinspect", "mcinspect"), ("mcinspect_engine_hooks", "engine_hooks"), ("mcinspect_kernels", "kernels")]:
        os.symlink(REPO / folder, os.path.join(links, name))
    sys.path.insert(0, links)


def pool(torch, device: str) -> SimpleNamespace:
    """A scheduler as ContentCapture reads it (req_to_token_pool.mamba_pool.mamba_cache) over a
    random pool in sglang's layout: 4 layers, 64 slots, bf16 conv [64, 3], fp32 SSM [4, 16, 16]."""
    generator = torch.Generator().manual_seed(0)
    conv = torch.randn(4, 65, 64, 3, generator=generator).to(torch.bfloat16)
    temporal = torch.randn(4, 65, 4, 16, 16, generator=generator)
    temporal[:, 9] = 0.0
    temporal[2, 11, 0, 0, 0] = float("nan")
    cache = SimpleNamespace(conv=[conv.to(device)], temporal=temporal.to(device))
    return SimpleNamespace(req_to_token_pool=SimpleNamespace(mamba_pool=SimpleNamespace(mamba_cache=cache)))


def cache_of(scheduler: SimpleNamespace) -> SimpleNamespace:
    return scheduler.req_to_token_pool.mamba_pool.mamba_cache


def check_contents(torch, device: str, checks: Checks) -> None:
    from mcinspect.schema import Step
    from mcinspect_engine_hooks.contents import DEFAULT_BUDGET, DEVICE_BUDGET_BYTES, RECHECK_EVERY, ContentCapture
    from mcinspect_kernels.fingerprint import slot_bytes

    host, other = pool(torch, "cpu"), pool(torch, device)
    sides = [ContentCapture(host), ContentCapture(other)]
    if device == "cpu":  # the torch path on the host: no numpy fold, no mirror
        sides[1]._fold = sides[1]._mirror = None
    else:
        cache = cache_of(other)
        per_slot = slot_bytes([*cache.conv, cache.temporal])
        checks.expect(sides[0]._budget == DEFAULT_BUDGET, f"host pool: the budget is {DEFAULT_BUDGET} slots")
        checks.expect(
            sides[1]._budget == DEVICE_BUDGET_BYTES // per_slot, f"{device} pool: {DEVICE_BUDGET_BYTES >> 20} MiB of slots a call"
        )
    owners = {slot: 100 + slot for slot in range(1, 21)}
    steps: list[list[dict]] = [[], []]
    for step in range(1, 3 * RECHECK_EVERY + 1):
        if step == RECHECK_EVERY + 1:  # an in-place write to a cached state, on both copies
            for scheduler in (host, other):
                cache_of(scheduler).temporal[1, 5, 0, 0, 0] += 1.0
        if step == RECHECK_EVERY + 2:  # slot 7 changes owner
            owners = {**owners, 7: 999}
        changes = set(range(1, 21)) if step == 1 else ({7} if step == RECHECK_EVERY + 2 else set())
        for side, out in zip(sides, steps):
            fresh, dropped = side.capture(Step(step), owners, set(changes))
            out.append({"fresh": {int(s): (c.fingerprint, c.nonfinite, c.zero) for s, c in fresh.items()}, "dropped": sorted(dropped)})
    checks.expect(steps[0] == steps[1], f"ContentCapture: {len(steps[0])} steps, host == {device}, step by step")
    published = [sorted(s["fresh"]) for s in steps[0]]
    checks.expect(published[1] == list(range(1, 21)), "the 20 slots published once stable (step 2)")
    checks.expect(published[RECHECK_EVERY + 2] == [7], f"the re-owned slot 7 published again once stable (step {RECHECK_EVERY + 3})")
    checks.expect(published[2 * RECHECK_EVERY - 1] == [5], f"the written slot 5 found at the next recheck (step {2 * RECHECK_EVERY})")
    checks.expect(steps[0][RECHECK_EVERY + 1]["dropped"] == [7], "slot 7 dropped when its owner changed")
    zero, nan = steps[0][1]["fresh"][9], steps[0][1]["fresh"][11]
    checks.expect(not zero[2] and nan[1] == 1, "slot 9's SSM zeroed (conv not), slot 11's NaN counted")


def check_tensor_runs(torch, device: str, checks: Checks) -> None:
    from mcinspect_engine_hooks.tensor_runs import free_token_runs, ints_of_many, kept, runs_of_many

    row = torch.tensor([5, 6, 7, 20, 21, 3], dtype=torch.int32)
    slots = torch.tensor([[4], [9]], dtype=torch.int64)
    values = [row, None, 17, [1, 2], slots, torch.zeros(0, dtype=torch.int64)]
    moved = [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]
    checks.expect(
        ints_of_many(moved) == ints_of_many(values) == [[5, 6, 7, 20, 21, 3], [], [17], [1, 2], [4, 9], []], "ints_of_many: host == device"
    )
    checks.expect(runs_of_many(moved) == runs_of_many(values), "runs_of_many: host == device")
    source = row.to(device)
    copy = kept(source)
    source[0] = 99
    checks.expect(ints_of_many([copy]) == [[5, 6, 7, 20, 21, 3]], "kept: a copy later writes do not reach")
    pages = torch.tensor([3, 4, 5, 9, 1], dtype=torch.int64)
    runs = free_token_runs(pages.to(device), 16)
    checks.expect(runs == free_token_runs(pages, 16) == [(16, 16), (48, 48), (144, 16)], "free_token_runs: host == device")


def check_no_sync(torch, checks: Checks, trials: int = 5) -> None:
    """Device slot ids (the copy-on-write capture's) are range-checked on the device: once the
    pool's chunk table is kept, a call queued behind 100 ms of GPU work returns before that work
    ends; an id out of range gives nonfinite -1 and the others their values. The call and the
    launch of the work it queues behind are timed apart, over several trials (stop 30 saw one
    call return after 25.7 ms with the two timed together, in its only trial)."""
    import time

    from mcinspect_kernels.fingerprint import fingerprint_slots

    scheduler = pool(torch, "cuda")
    conv, temporal = cache_of(scheduler).conv, cache_of(scheduler).temporal
    size = temporal.shape[1]
    ids = torch.tensor([1, size, -3, 11], device="cuda")
    fingerprint_slots(conv, temporal, ids)  # the pool's first call copies its chunk table to the device: that waits
    torch.cuda._sleep(1000)  # the sleep kernel's module loads at its first launch
    torch.cuda.synchronize()
    calls, launches, waits = [], [], []
    for _ in range(trials):
        began = time.perf_counter()
        torch.cuda._sleep(200_000_000)  # ~100 ms of one SM's clock cycles, on the current stream
        launched = time.perf_counter()
        queued = fingerprint_slots(conv, temporal, ids)
        returned = time.perf_counter()
        torch.cuda.synchronize()
        launches.append(launched - began)
        calls.append(returned - launched)
        waits.append(time.perf_counter() - began)

    def ms(values: list[float]) -> str:
        return " ".join(f"{value * 1e3:.1f}" for value in values)

    print(
        f"  no-sync trials: the call returned after {ms(calls)} ms; the queued work's launch {ms(launches)} ms; all done after {ms(waits)} ms"
    )
    checks.expect(
        all(call < wait / 4 for call, wait in zip(calls, waits)),
        f"device ids: the call returned after {ms(calls)} ms of {ms(waits)} ms queued (no sync)",
    )
    host = fingerprint_slots(conv, temporal, torch.tensor([1, 11]))
    nonfinite = queued.nonfinite.tolist()
    same = queued.fingerprint[[0, 3]].tolist() == host.fingerprint.tolist() and nonfinite[0::3] == host.nonfinite.tolist()
    checks.expect(same and nonfinite[1:3] == [-1, -1], f"ids out of range: nonfinite {nonfinite} (-1), the others as from host ids")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    import torch

    if args.device != "cpu" and not torch.cuda.is_available():
        print("no CUDA device (use --device cpu for the host smoke run)")
        return 2
    import_checkout()
    checks = Checks()
    name = torch.cuda.get_device_name() if args.device != "cpu" else "CPU (the torch path)"
    print(f"{name}: the engine hooks' device paths against their host paths")
    check_contents(torch, args.device, checks)
    check_tensor_runs(torch, args.device, checks)
    if args.device != "cpu":  # the host has no queue to wait for
        check_no_sync(torch, checks)
    print(f"FAIL: {len(checks.failures)} check(s)" if checks.failures else "PASS")
    return 1 if checks.failures else 0


if __name__ == "__main__":
    sys.exit(main())
