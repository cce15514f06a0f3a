"""How far apart two mamba states are: per pair, the max-abs difference and the relative L2
distance over all layers of conv and temporal (pool layout as in `fingerprint`).

    max_abs = max over elements of |a - b|
    rel_l2  = ||a - b||_2 / max(||b||_2, eps)

Both computed in fp32: elements are converted to fp32 (exact for fp16/bf16/fp32), subtracted in
fp32, and squared in fp32; per-chunk fp32 partial sums are then added in fp64. `b` is the
reference side: the second slot of a pair, or the recomputed state in `state_distance_to`.

Tolerance semantics:
- `max_abs` is bit-identical on the Triton and torch paths (a correctly rounded subtraction and
  a max do not depend on order). It is 0 exactly when the states are numerically equal
  (+0.0 == -0.0; use fingerprints for bit equality).
- `rel_l2` is 0 exactly for numerically equal states on both paths; otherwise the two paths sum
  squares in different orders and agree to about 1e-6 relative (checks compare with rtol 1e-5).
- NaN anywhere in a - b (a NaN in either state, or Inf - Inf) makes both results NaN. An Inf
  difference makes max_abs Inf and rel_l2 Inf (NaN if the reference holds the Inf: Inf / Inf).
  A zero reference (`||b|| < eps`) gives ||a - b|| / eps.
- What distance counts as "the same state" is the caller's threshold, not this module's. A
  recompute by the same CPU build is bit-identical (max_abs 0). A GPU recompute through another
  batch or chunk schedule differs by rounding only, of the order of the states' precision (bf16
  conv windows: 2^-8 relative per element); calibrate the threshold on a clean run. A state taken
  at the wrong position or from another request differs by far more than rounding.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from .fingerprint import (
    Backend,
    PoolLayoutError,
    check_slots,
    chunk_layout,
    launch_groups,
    launch_shape,
    on_device,
    pool_tensors,
    row_words,
    to_chunk_table,
    triton,
    triton_type,
    use_triton,
    word_format,
)

if triton is not None:
    import triton.language as tl

DEFAULT_EPS = 1e-12
"""Floor of ||b|| in rel_l2, so that a zero reference gives a huge distance, not a division by 0."""


class StateDistance(NamedTuple):
    max_abs: Tensor
    """float32 [n]."""
    rel_l2: Tensor
    """float32 [n]."""


def state_distance(
    conv: list[Tensor],
    temporal: Tensor,
    a_slots: Tensor,
    b_slots: Tensor,
    *,
    eps: float = DEFAULT_EPS,
    backend: Backend = "auto",
) -> StateDistance:
    """Distance between slot a_slots[i] and slot b_slots[i] of the same pool, per i."""
    pool = pool_tensors(conv, temporal)
    a = check_slots(a_slots, temporal, "a_slots")
    b = check_slots(b_slots, temporal, "b_slots")
    if a.numel() != b.numel():
        raise PoolLayoutError(f"a_slots and b_slots differ in length: {a.numel()} != {b.numel()}")
    return _distance(pool, a, pool, b, eps, backend)


def state_distance_to(
    conv: list[Tensor],
    temporal: Tensor,
    slots: Tensor,
    ref_conv: list[Tensor],
    ref_temporal: Tensor,
    *,
    eps: float = DEFAULT_EPS,
    backend: Backend = "auto",
) -> StateDistance:
    """Distance between slot slots[i] and reference state i, per i. The references are states
    recomputed elsewhere, laid out like the pool with dim 1 indexing the pairs: `ref_conv[j]`
    is [num_layers, n, *conv[j].shape[2:]], `ref_temporal` [num_layers, n, *temporal.shape[2:]],
    in any supported float dtype (moved to the pool's device if elsewhere)."""
    pool = pool_tensors(conv, temporal)
    a = check_slots(slots, temporal)
    refs = [r.to(temporal.device) for r in [*ref_conv, ref_temporal]]
    if len(refs) != len(pool):
        raise PoolLayoutError(f"{len(refs) - 1} reference conv tensors for {len(pool) - 1} in the pool")
    for t, r in zip(pool, refs):
        word_format(r)
        if r.shape != (t.shape[0], a.numel(), *t.shape[2:]):
            raise PoolLayoutError(f"reference shaped {tuple(r.shape)}, expected {(t.shape[0], a.numel(), *t.shape[2:])}")
    # n states, not a pool: a copy to make them contiguous, when needed, is cheap.
    refs = [r.contiguous() for r in refs]
    return _distance(pool, a, refs, torch.arange(a.numel(), device=a.device), eps, backend)


class _Sums(NamedTuple):
    """Per-pair reductions from which both results follow; each path produces these."""

    max_abs: Tensor
    """float32 [n], NaN differences excluded."""
    nan: Tensor
    """bool [n]: some difference is NaN."""
    sum_dd: Tensor
    """float64 [n]: sum of squared fp32 differences."""
    sum_bb: Tensor
    """float64 [n]: sum of squared fp32 reference elements."""


def _distance(a_pool: list[Tensor], a: Tensor, b_pool: list[Tensor], b: Tensor, eps: float, backend: Backend) -> StateDistance:
    """Element a[i] of every tensor in a_pool against element b[i] of its b_pool counterpart."""
    sums = (_sums_triton if use_triton(a_pool[-1], backend) else _sums_torch)(a_pool, a, b_pool, b)
    rel_l2 = sums.sum_dd.sqrt() / sums.sum_bb.sqrt().clamp(min=eps)
    return StateDistance(torch.where(sums.nan, float("nan"), sums.max_abs), torch.where(sums.nan, float("nan"), rel_l2).float())


def _sums_torch(a_pool: list[Tensor], a: Tensor, b_pool: list[Tensor], b: Tensor) -> _Sums:
    """Gathers each pair's rows (copies: this is the reference and CPU path)."""
    n = a.numel()
    max_abs = torch.zeros(n, dtype=torch.float32, device=a.device)
    nan = torch.zeros(n, dtype=torch.bool, device=a.device)
    sum_dd = torch.zeros(n, dtype=torch.float64, device=a.device)
    sum_bb = torch.zeros_like(sum_dd)
    for ta, tb in zip(a_pool, b_pool):
        shape = (ta.shape[0], n, row_words(ta))
        x = ta.index_select(1, a).float().reshape(shape)
        y = tb.index_select(1, b).float().reshape(shape)
        d = x - y
        is_nan = d.isnan()
        nan |= is_nan.any(2).any(0)
        max_abs = torch.maximum(max_abs, d.abs().masked_fill_(is_nan, 0).amax((0, 2)))
        sum_dd += (d * d).sum((0, 2), dtype=torch.float64)
        sum_bb += (y * y).sum((0, 2), dtype=torch.float64)
    return _Sums(max_abs, nan, sum_dd, sum_bb)


def _sums_triton(a_pool: list[Tensor], a: Tensor, b_pool: list[Tensor], b: Tensor) -> _Sums:
    """One launch per dtype group of (pool, reference) pairs, reading both sides in place;
    each program writes its chunk's partials, reduced here in chunk order (deterministic)."""
    n = a.numel()
    partials = []
    for group in launch_groups([(ta.dtype, tb.dtype) for ta, tb in zip(a_pool, b_pool)]):
        a_members = [a_pool[i] for i in group]
        block, iters = launch_shape(a_members)
        table = []
        for i in group:
            ta, tb = a_pool[i], b_pool[i]
            layer, start, count = chunk_layout(ta, block * iters)
            rows = [t.data_ptr() + (layer * t.stride(0) + start) * t.element_size() for t in (ta, tb)]
            strides = [torch.full_like(layer, t.stride(1) * t.element_size()) for t in (ta, tb)]
            table.append(torch.stack([rows[0], rows[1], count, strides[0], strides[1]], 1))
        chunks = to_chunk_table(table, a.device)
        part = torch.empty(4, n, chunks.shape[0], dtype=torch.float32, device=a.device)
        if n:
            with on_device(a.device):
                _distance_kernel[(n, chunks.shape[0])](
                    a, b, chunks, part, n * chunks.shape[0], chunks.shape[0],
                    A_TYPE=triton_type(a_members[0].dtype), B_TYPE=triton_type(b_pool[group[0]].dtype), BLOCK=block, ITERS=iters,
                )  # fmt: skip
        partials.append(part)
    part = torch.cat(partials, 2)
    return _Sums(part[0].amax(1), part[1].sum(1) > 0, part[2].double().sum(1), part[3].double().sum(1))


if triton is not None:

    @triton.jit
    def _distance_kernel(
        a_slots, b_slots, chunks, part, PART_STRIDE, n_chunks,
        A_TYPE: tl.constexpr, B_TYPE: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr,
    ):  # fmt: skip
        """Program (i, c) reduces chunk c (a_row, b_row, count, a_slot_stride, b_slot_stride)
        of pair i into part[:, i, c] = (max |d| without NaN, NaN count, sum d^2, sum b^2)."""
        i = tl.program_id(0)
        c = tl.program_id(1)
        chunk = chunks + c * 5
        count = tl.load(chunk + 2)
        x_ptr = (tl.load(chunk) + tl.load(a_slots + i) * tl.load(chunk + 3)).to(tl.pointer_type(A_TYPE))
        y_ptr = (tl.load(chunk + 1) + tl.load(b_slots + i) * tl.load(chunk + 4)).to(tl.pointer_type(B_TYPE))
        lanes = tl.arange(0, BLOCK)
        max_abs = tl.zeros([BLOCK], dtype=tl.float32)
        nans = tl.zeros([BLOCK], dtype=tl.float32)
        sum_dd = tl.zeros([BLOCK], dtype=tl.float32)
        sum_bb = tl.zeros([BLOCK], dtype=tl.float32)
        for it in range(ITERS):
            offs = it * BLOCK + lanes
            mask = offs < count
            x = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.float32)
            y = tl.load(y_ptr + offs, mask=mask, other=0).to(tl.float32)
            d = x - y
            is_nan = d != d
            max_abs = tl.maximum(max_abs, tl.where(is_nan, 0.0, tl.abs(d)))
            nans += is_nan.to(tl.float32)
            sum_dd += d * d
            sum_bb += y * y
        out = part + i * n_chunks + c
        tl.store(out, tl.max(max_abs, 0))
        tl.store(out + PART_STRIDE, tl.sum(nans, 0))
        tl.store(out + 2 * PART_STRIDE, tl.sum(sum_dd, 0))
        tl.store(out + 3 * PART_STRIDE, tl.sum(sum_bb, 0))
