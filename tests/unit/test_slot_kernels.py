"""Slot fingerprints and state distances (mcinspect_kernels.fingerprint / .state_distance).

The torch path is checked against a pure-Python transcription of the fingerprint's documented
definition and against hand-computed distances; the Triton kernels are checked against the
torch path under the Triton interpreter, in a subprocess (TRITON_INTERPRET must be set before
triton is imported). Run this file as a script with TRITON_INTERPRET=1 to see that comparison.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mcinspect_kernels import fingerprint as fingerprint_module
from mcinspect_kernels import state_distance as distance_module
from mcinspect_kernels.fingerprint import BackendUnavailable, PoolLayoutError, fingerprint_slots
from mcinspect_kernels.state_distance import state_distance, state_distance_to

U64 = 1 << 64


def make_pool(
    size: int = 8,
    *,
    layers: int = 3,
    conv_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16, torch.float16),
    temporal_dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """A pool shaped like sglang's (conv j: [layers, size + 1, 4 + j, 3]; temporal:
    [layers, size + 1, 2, 3, 4]), random states, slot 0 zero like sglang's dummy slot."""
    generator = torch.Generator().manual_seed(seed)
    conv = [torch.randn(layers, size + 1, 4 + j, 3, generator=generator).to(dtype) for j, dtype in enumerate(conv_dtypes)]
    temporal = torch.randn(layers, size + 1, 2, 3, 4, generator=generator).to(temporal_dtype)
    for t in [*conv, temporal]:
        t[:, 0] = 0
    return conv, temporal


def fingerprints(conv: list[torch.Tensor], temporal: torch.Tensor, slots: list[int]) -> list[int]:
    return fingerprint_slots(conv, temporal, torch.tensor(slots), backend="torch").fingerprint.tolist()


# --- the definition, transcribed from the module docstring -------------------------------


def spec_mix(z: int) -> int:
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % U64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % U64
    return z ^ (z >> 31)


def spec_fingerprint(tensors: list[torch.Tensor], slot: int) -> int:
    words = []
    for t in tensors:
        bits = 8 * t.element_size()
        integer = {16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]
        words += [w % (1 << bits) for w in t[:, slot].contiguous().view(integer).flatten().tolist()]
    total = sum(spec_mix(w ^ ((p + 1) * 0x9E3779B97F4A7C15 % U64)) for p, w in enumerate(words)) % U64
    digest = spec_mix((total + len(words)) % U64)
    return digest - U64 if digest >= 1 << 63 else digest


@pytest.mark.parametrize(
    "conv_dtypes, temporal_dtype",
    [((torch.bfloat16,), torch.float32), ((torch.bfloat16, torch.float16), torch.float32), ((torch.float32,), torch.float64)],
)
def test_torch_fingerprint_is_the_documented_function(conv_dtypes, temporal_dtype) -> None:
    conv, temporal = make_pool(4, layers=2, conv_dtypes=conv_dtypes, temporal_dtype=temporal_dtype)
    slots = [3, 0, 1, 4]
    assert fingerprints(conv, temporal, slots) == [spec_fingerprint([*conv, temporal], s) for s in slots]


@pytest.mark.parametrize("block_words", [40, 200, 1 << 18])
def test_torch_blocks_do_not_change_the_result(block_words, monkeypatch) -> None:
    """Budgets that split a slot's layers (40 words: 2 of 3 layers), that hold several slots
    (200), or everything at once (the default) all give the documented values."""
    import mcinspect_kernels.fingerprint as fingerprint_module

    monkeypatch.setattr(fingerprint_module, "_TORCH_BLOCK_WORDS", block_words)
    conv, temporal = make_pool(6, layers=3, conv_dtypes=(torch.bfloat16, torch.float32))
    temporal[1, 2, 0, 0, 0] = float("nan")
    slots = [2, 5, 0, 6, 1]
    result = fingerprint_slots(conv, temporal, torch.tensor(slots), backend="torch")
    assert result.fingerprint.tolist() == [spec_fingerprint([*conv, temporal], s) for s in slots]
    assert result.nonfinite.tolist() == [1, 0, 0, 0, 0]
    assert result.all_zero.tolist() == [False, False, True, False, False]


@pytest.mark.parametrize("block_words", [40, 200, 1 << 18])
@pytest.mark.parametrize(
    "conv_dtypes, temporal_dtype", [((torch.bfloat16, torch.float16), torch.float32), ((torch.float32,), torch.float64)]
)
def test_torch_ops_path_gives_the_host_path_values(block_words, conv_dtypes, temporal_dtype, monkeypatch) -> None:
    """On CPU tensors fingerprint_slots folds in numpy; the torch-ops fold (devices without
    Triton) must give the same three results, non-finite and zero slots included."""
    monkeypatch.setattr(fingerprint_module, "_TORCH_BLOCK_WORDS", block_words)
    conv, temporal = make_pool(6, layers=3, conv_dtypes=conv_dtypes, temporal_dtype=temporal_dtype)
    temporal[2, 3, 1, 1, 1] = float("inf")
    slots = torch.tensor([4, 0, 3, 6, 1])
    host = fingerprint_slots(conv, temporal, slots)
    tensors = [*conv, temporal]
    total, nonfinite, nonzero = fingerprint_module._fold_torch(tensors, slots)
    words = sum(t.shape[0] * fingerprint_module.row_words(t) for t in tensors)
    assert fingerprint_module.mix64_(total + words).tolist() == host.fingerprint.tolist()
    assert nonfinite.tolist() == host.nonfinite.tolist() == [0, 0, 1, 0, 0]
    assert (nonzero == 0).tolist() == host.all_zero.tolist() == [False, True, False, False, False]


@pytest.mark.parametrize("block_words", [40, 1 << 18])
@pytest.mark.parametrize(
    "conv_dtypes, temporal_dtype", [((torch.bfloat16, torch.float16), torch.float32), ((torch.float32,), torch.float64)]
)
def test_prepared_host_fold_gives_the_torch_ops_values_one_slot_or_many(block_words, conv_dtypes, temporal_dtype, monkeypatch) -> None:
    """HostFold (the engine's prepared host path) on one slot (rows read as views, final mix on
    Python ints) and on more slots than it mixes on Python ints (numpy), in one block or split
    (40 words: by layers): every value is the torch-ops fold's, NaN/Inf/-0.0 slots included."""
    monkeypatch.setattr(fingerprint_module, "_TORCH_BLOCK_WORDS", block_words)
    conv, temporal = make_pool(fingerprint_module._FEW + 3, layers=3, conv_dtypes=conv_dtypes, temporal_dtype=temporal_dtype)
    conv[0][1, 2, 0, 0] = float("nan")
    temporal.view(torch.int64 if temporal_dtype == torch.float64 else torch.int32)[0, 4, 0, 0, 0] = -1  # a negative NaN
    temporal[2, 5, 1, 1, 1] = float("-inf")
    for t in [*conv, temporal]:
        t[:, 6] = -0.0
    tensors = [*conv, temporal]
    slots = list(range(temporal.shape[1]))[::-1]
    total, nonfinite, nonzero = fingerprint_module._fold_torch(tensors, torch.tensor(slots))
    words = sum(t.shape[0] * fingerprint_module.row_words(t) for t in tensors)
    expected = (fingerprint_module.mix64_(total + words).tolist(), nonfinite.tolist(), (nonzero == 0).tolist())
    by_slot = dict(zip(slots, zip(*expected)))
    assert [by_slot[s][1] for s in (2, 3, 4, 5)] == [1, 0, 1, 1] and by_slot[6][2] and by_slot[0][2] and not by_slot[1][2]
    fold = fingerprint_module.HostFold.of_pool(conv, temporal)
    assert tuple(fold(slots)) == expected
    alone = [fold([slot]) for slot in slots]
    assert ([a.fingerprint[0] for a in alone], [a.nonfinite[0] for a in alone], [a.all_zero[0] for a in alone]) == expected
    assert fold.zero(slots) == expected[2]  # the zero flags alone, without the fold


def test_prepared_host_fold_refuses_what_fingerprint_slots_refuses() -> None:
    conv, temporal = make_pool(4)
    fold = fingerprint_module.HostFold.of_pool(conv, temporal)
    for slots in ([1, 5], [-1]):
        with pytest.raises(PoolLayoutError, match="out of range"):
            fold(slots)
        with pytest.raises(PoolLayoutError, match="out of range"):
            fold.zero(slots)
    assert fold([]) == ([], [], []) and fold.zero([]) == []
    assert fingerprint_module.HostFold.of_pool(conv, temporal.transpose(3, 4)) is None


# --- fingerprint properties ---------------------------------------------------------------


def test_fingerprint_is_deterministic_and_independent_of_slot_order() -> None:
    conv, temporal = make_pool(8)
    slots = [5, 1, 8, 2, 7]
    first = dict(zip(slots, fingerprints(conv, temporal, slots)))
    assert dict(zip(slots, fingerprints(conv, temporal, slots))) == first
    shuffled = [7, 2, 5, 8, 1]
    assert dict(zip(shuffled, fingerprints(conv, temporal, shuffled))) == first
    assert len(set(first.values())) == len(slots)


def test_identical_contents_give_identical_fingerprints() -> None:
    conv, temporal = make_pool(8)
    for t in [*conv, temporal]:
        t[:, 6] = t[:, 3]
    fp = fingerprints(conv, temporal, [3, 6, 3, 4])
    assert fp[0] == fp[1] == fp[2] != fp[3]


def test_every_single_bit_flip_changes_the_fingerprint() -> None:
    """Slot 1 is the base; each further slot is a copy with one bit flipped: every bit of
    three words (first word of layer 0, a middle word, last word of the last layer) of every
    tensor. All fingerprints must be pairwise distinct."""
    conv, temporal = make_pool(1, conv_dtypes=(torch.bfloat16, torch.float16))
    tensors = [*conv, temporal]
    flips = []
    for index, t in enumerate(tensors):
        row = t[0, 1].numel()
        for layer, element in ((0, 0), (1, row // 2), (t.shape[0] - 1, row - 1)):
            flips += [(index, layer, element, bit) for bit in range(8 * t.element_size())]
    grown = []
    for t in tensors:
        copies = t[:, 1:2].expand(-1, len(flips), *t.shape[2:])
        grown.append(torch.cat([t, copies], 1).contiguous())
    for k, (index, layer, element, bit) in enumerate(flips):
        bits = 8 * grown[index].element_size()
        words = grown[index].view({16: torch.int16, 32: torch.int32}[bits])[layer, 2 + k].view(-1)
        words[element] ^= (1 << bit) - (1 << bits if bit == bits - 1 else 0)  # the sign bit as a signed int
    fp = fingerprints(grown[:-1], grown[-1], list(range(1, 2 + len(flips))))
    assert len(set(fp)) == len(fp) == 1 + len(flips)


def test_moving_words_changes_the_fingerprint() -> None:
    conv, temporal = make_pool(3)
    base = fingerprints(conv, temporal, [1])[0]
    swapped = temporal.clone()
    swapped[0, 1].view(-1)[[0, 1]] = temporal[0, 1].view(-1)[[1, 0]]
    layers_swapped = temporal.clone()
    layers_swapped[[0, 1], 1] = temporal[[1, 0], 1]
    assert fingerprints(conv, swapped, [1])[0] != base
    assert fingerprints(conv, layers_swapped, [1])[0] != base


def test_nonfinite_elements_are_counted_exactly() -> None:
    conv, temporal = make_pool(4, conv_dtypes=(torch.bfloat16, torch.float16))
    inf, nan = float("inf"), float("nan")
    conv[0][0, 2, 0, 0] = nan
    conv[0][2, 2, 3, 2] = -inf
    conv[1][1, 2, 4, 1] = inf
    temporal[2, 2, 1, 2, 3] = nan
    temporal.view(torch.int32)[0, 2, 0, 0, 0] = -1  # a negative NaN with every payload bit set
    temporal[1, 3, 0, 0, 0] = torch.finfo(torch.float32).max  # largest finite: not counted
    conv[0][1, 3, 0, 0] = torch.finfo(torch.bfloat16).max
    conv[0][1, 4, 0, 0] = inf
    result = fingerprint_slots(conv, temporal, torch.tensor([1, 2, 3, 4]), backend="torch")
    assert result.nonfinite.tolist() == [0, 5, 0, 1]


def test_zero_detection_counts_negative_zero_as_zero() -> None:
    """-0.0 == 0.0, so a slot of -0.0 is all-zero; its fingerprint still differs (other bits)."""
    conv, temporal = make_pool(4)
    tensors = [*conv, temporal]
    for t in tensors:
        t[:, 2] = 0.0
        t[:, 3] = -0.0
        t[:, 4] = 0.0
    tensors[-1].view(torch.int32)[1, 4, 1, 1, 1] = 1  # smallest subnormal: not zero
    result = fingerprint_slots(conv, temporal, torch.tensor([0, 1, 2, 3, 4]), backend="torch")
    assert result.all_zero.tolist() == [True, False, True, True, False]
    fp = result.fingerprint.tolist()
    assert fp[0] == fp[2] != fp[3]


def test_layout_strides_do_not_matter() -> None:
    """A pool stored slot-major (layer stride < slot stride) fingerprints like a copy."""
    conv, temporal = make_pool(5)
    strided = [t.transpose(0, 1).contiguous().transpose(0, 1) for t in [*conv, temporal]]
    assert fingerprints(strided[:-1], strided[-1], [1, 4]) == fingerprints(conv, temporal, [1, 4])


def test_the_fingerprint_chunk_table_is_built_once_per_layout() -> None:
    """Rows of 3 fp32 words cut into chunks of 2: (row address, words, first position, slot
    stride in bytes) per chunk, layer by layer; the same layout gives the same table object."""
    pool = torch.zeros(2, 5, 3)
    base = pool.data_ptr()
    layout = ((base, (2, 5, 3), (15, 3, 1), 4, 7),)
    table = fingerprint_module._fingerprint_chunks(layout, 2, torch.device("cpu"))
    assert table.tolist() == [[base, 2, 7, 12], [base + 8, 1, 9, 12], [base + 60, 2, 10, 12], [base + 68, 1, 12, 12]]
    assert fingerprint_module._fingerprint_chunks(layout, 2, torch.device("cpu")) is table


def test_bad_inputs_are_refused(monkeypatch) -> None:
    conv, temporal = make_pool(4)
    with pytest.raises(PoolLayoutError, match="out of range"):
        fingerprint_slots(conv, temporal, torch.tensor([1, 5]))
    with pytest.raises(PoolLayoutError, match="1-D integer"):
        fingerprint_slots(conv, temporal, torch.tensor([1.0]))
    with pytest.raises(PoolLayoutError, match="contiguous"):
        fingerprint_slots(conv, temporal.transpose(3, 4), torch.tensor([1]))
    with pytest.raises(PoolLayoutError, match="dtype"):
        fingerprint_slots(conv, temporal.to(torch.int32), torch.tensor([1]))
    assert fingerprint_slots(conv, temporal, torch.tensor([], dtype=torch.int64)).fingerprint.shape == (0,)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendUnavailable, match="CUDA"):
        fingerprint_slots(conv, temporal, torch.tensor([1]), backend="triton")
    with pytest.raises(ValueError, match="backend"):
        fingerprint_slots(conv, temporal, torch.tensor([1]), backend="cuda")


# --- distances ----------------------------------------------------------------------------


def hand_pool() -> tuple[list[torch.Tensor], torch.Tensor]:
    """Slot 1: conv all 1.0 (2 layers x 4), temporal all 2.0 (2 layers x 3): ||b||^2 = 8 + 24.
    Slot 2: slot 1 with conv[1, 2, 0, 1] = 1.5 and temporal[0, 2, 2] = -1.0, so
    d = (0.5, -3.0): max_abs 3, ||d||^2 = 9.25, ||a||^2 = 7 + 2.25 + 20 + 1 = 30.25. Slot 3: all +0.0. Slot 4: all -0.0."""
    conv = torch.zeros(2, 5, 2, 2, dtype=torch.bfloat16)
    temporal = torch.zeros(2, 5, 3)
    conv[:, 1:3] = 1.0
    temporal[:, 1:3] = 2.0
    conv[1, 2, 0, 1] = 1.5
    temporal[0, 2, 2] = -1.0
    conv[:, 4] = -0.0
    temporal[:, 4] = -0.0
    return [conv], temporal


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_distance_on_hand_computed_states(backend) -> None:
    conv, temporal = hand_pool()
    got = state_distance(conv, temporal, torch.tensor([2, 1, 1, 3, 4, 1]), torch.tensor([1, 2, 1, 3, 3, 3]), backend=backend)
    assert got.max_abs.tolist() == [3.0, 3.0, 0.0, 0.0, 0.0, 2.0]
    expected_rel = [math.sqrt(9.25 / 32), math.sqrt(9.25 / 30.25), 0.0, 0.0, 0.0, math.sqrt(32) / 1e-12]
    assert got.rel_l2.tolist() == pytest.approx(expected_rel, rel=1e-6)
    assert got.max_abs.dtype == got.rel_l2.dtype == torch.float32


def test_distance_propagates_nan() -> None:
    conv, temporal = hand_pool()
    temporal[1, 2, 0] = float("nan")
    got = state_distance(conv, temporal, torch.tensor([2, 1]), torch.tensor([1, 1]), backend="torch")
    assert math.isnan(got.max_abs[0]) and math.isnan(got.rel_l2[0])
    assert got.max_abs[1] == 0 and got.rel_l2[1] == 0


def test_distance_to_given_states() -> None:
    """References recomputed elsewhere, in another dtype: slot 2's state rebuilt in fp32
    and fp64 is at distance 0; slot 1's state against slot 2's reference is the hand value."""
    conv, temporal = hand_pool()
    ref_conv = [conv[0][:, [2, 2]].float()]
    ref_temporal = temporal[:, [2, 2]].double()
    got = state_distance_to(conv, temporal, torch.tensor([2, 1]), ref_conv, ref_temporal, backend="torch")
    assert got.max_abs.tolist() == [0.0, 3.0]
    assert got.rel_l2.tolist() == pytest.approx([0.0, math.sqrt(9.25 / 30.25)], rel=1e-6)
    with pytest.raises(PoolLayoutError, match="reference shaped"):
        state_distance_to(conv, temporal, torch.tensor([2]), ref_conv, ref_temporal)
    with pytest.raises(PoolLayoutError, match="differ in length"):
        state_distance(conv, temporal, torch.tensor([2]), torch.tensor([1, 2]))


# --- Triton kernels under the interpreter -------------------------------------------------


def test_triton_kernels_match_torch_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    if report.get("skip"):
        pytest.skip(report["skip"])
    assert done.returncode == 0 and report.get("mismatches") == [], done.stdout[-3000:] + done.stderr[-3000:]
    assert report["cases"] >= 6


def test_gpu_check_script_runs_under_the_interpreter() -> None:
    """tests/gpu/check_slot_kernels.py on a tiny CPU pool, so the GPU check cannot rot between
    the rare runs on a GPU machine."""
    script = Path(__file__).resolve().parents[1] / "gpu" / "check_slot_kernels.py"
    done = subprocess.run([sys.executable, str(script), "--interpret"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout[-3000:] + done.stderr[-3000:]


def test_device_paths_check_runs_on_the_host() -> None:
    """tests/gpu/check_device_paths.py with its device side on the host (the torch fold, no
    mirror): the content capture and index reads compared step by step with the host paths."""
    script = Path(__file__).resolve().parents[1] / "gpu" / "check_device_paths.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("PASS"), done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("  ok   ") == 10


class CountingKernel:
    """Stands in for a Triton kernel to count launches (`kernel[grid](...)`)."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.launches = 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


def interpreter_cases() -> list[tuple[str, list[torch.Tensor], torch.Tensor]]:
    """Pools exercising dtypes, several conv tensors (one launch per dtype group), strided
    layouts, chunked rows, special values and slot 0."""
    cases = [("bf16 conv, fp32 temporal", *make_pool(6, conv_dtypes=(torch.bfloat16,)))]
    cases.append(("bf16 + fp16 conv", *make_pool(6)))
    cases.append(("two bf16 conv, fp64 temporal", *make_pool(6, conv_dtypes=(torch.bfloat16,) * 2, temporal_dtype=torch.float64)))
    conv, temporal = make_pool(6, seed=1)
    cases.append(("slot-major strides", [t.transpose(0, 1).contiguous().transpose(0, 1) for t in conv], temporal))
    generator = torch.Generator().manual_seed(2)
    long_rows = torch.randn(2, 7, 3, 3000, generator=generator)  # 9000 words a row: 2 chunks of <= 8192
    cases.append(("rows longer than one block", [torch.randn(2, 7, 700, 3, generator=generator).bfloat16()], long_rows))
    conv, temporal = make_pool(6, seed=3)
    conv[0][1, 2, 0, 0] = float("nan")
    temporal[2, 3, 1, 1, 1] = float("inf")
    temporal[:, 4] = -0.0
    conv[1][:, 5] = conv[1][:, 1]
    temporal[:, 5] = temporal[:, 1]
    cases.append(("NaN, Inf, -0.0, copies", conv, temporal))
    return cases


def out_of_range_on_the_device(conv: list[torch.Tensor], temporal: torch.Tensor) -> list[str]:
    """Ids the host does not check (device ids: a check there syncs): those outside the pool
    give an empty slot's results with -1 NaN/Inf; the others fold as when checked."""
    size = temporal.shape[1]
    total, nonfinite, nonzero = fingerprint_module._fold_device_ids([*conv, temporal], torch.tensor([1, size, -3, 2]))
    want = fingerprint_slots(conv, temporal, torch.tensor([1, 2]), backend="torch")
    words = sum(t.shape[0] * fingerprint_module.row_words(t) for t in [*conv, temporal])
    prints = fingerprint_module.mix64_(total + words)
    problems = []
    if nonfinite.tolist() != [want.nonfinite[0].item(), -1, -1, want.nonfinite[1].item()]:
        problems.append(f"out-of-range ids: nonfinite {nonfinite.tolist()}")
    if prints[[0, 3]].tolist() != want.fingerprint.tolist() or nonzero[[1, 2]].tolist() != [0, 0] or total[[1, 2]].tolist() != [0, 0]:
        problems.append(
            f"out-of-range ids: fingerprints {prints.tolist()} (want {want.fingerprint.tolist()} at 0 and 3), nonzero {nonzero.tolist()}"
        )
    return problems


def run_interpreter_comparison() -> int:
    """Triton (interpreted) vs torch on every case: fingerprints, counts and zero flags
    identical; max_abs identical; rel_l2 within 1e-5. Prints one JSON line."""
    try:
        import triton  # noqa: F401
    except ImportError as missing:
        print(json.dumps({"skip": f"Triton is not installed: {missing}"}))
        return 0
    mismatches = []
    cases = interpreter_cases()
    fingerprint_kernel = fingerprint_module._fingerprint_kernel = CountingKernel(fingerprint_module._fingerprint_kernel)
    distance_kernel = distance_module._distance_kernel = CountingKernel(distance_module._distance_kernel)
    for name, conv, temporal in cases:
        size = temporal.shape[1]
        slots = torch.tensor([size - 1, 0, *range(1, size - 1), 2])
        a, b = torch.tensor([1, 2, 4, 5, 3]), torch.tensor([2, 2, 0, 1, 4])
        refs = [t[:, b].float() * 1.01 for t in [*conv, temporal]]
        results = {
            "fingerprint": lambda backend: fingerprint_slots(conv, temporal, slots, backend=backend),  # noqa: B023  (called in this iteration)
            "distance": lambda backend: state_distance(conv, temporal, a, b, backend=backend),  # noqa: B023  (called in this iteration)
            "distance_to": lambda backend: state_distance_to(conv, temporal, a, refs[:-1], refs[-1], backend=backend),  # noqa: B023  (called in this iteration)
        }
        for what, compute in results.items():
            expected = compute("torch")
            kernel = fingerprint_kernel if what == "fingerprint" else distance_kernel
            launches = kernel.launches
            got = compute("triton")
            dtype_groups = len({t.dtype for t in [*conv, temporal]})  # the references here are all fp32
            if what != "distance_to" and kernel.launches - launches != dtype_groups:
                mismatches.append(f"{name}: {what} took {kernel.launches - launches} launches for {dtype_groups} dtype groups")
            for field, want, have in zip(expected._fields, expected, got):
                if field == "rel_l2":
                    same = torch.allclose(have, want, rtol=1e-5, atol=0, equal_nan=True)
                else:
                    same = torch.equal(have.nan_to_num(), want.nan_to_num()) and torch.equal(have.isnan(), want.isnan())
                if not same:
                    mismatches.append(f"{name}: {what}.{field} triton {have.tolist()} != torch {want.tolist()}")
    mismatches += out_of_range_on_the_device(*cases[0][1:])
    print(json.dumps({"cases": len(cases), "mismatches": mismatches}))
    return 1 if mismatches else 0


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (the Triton kernels run on CPU tensors only under the interpreter)")
    sys.exit(run_interpreter_comparison())
