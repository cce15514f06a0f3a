"""Slot fingerprints: a 64-bit digest of each mamba slot's raw state bits, plus NaN/Inf and
zero detection, in one pass (one Triton launch per tensor family on CUDA, numpy on CPU tensors,
torch elsewhere).

A pool is sglang's `mamba_pool.mamba_cache`: `conv`, a list of tensors shaped
`[num_layers, size + 1, *conv_row]`, and `temporal`, `[num_layers, size + 1, *ssm_row]`; slot s
is index s on dim 1. Any of fp16, bf16, fp32, fp64 (per tensor).

Definition (identical on both paths, to the bit). The words of slot s, w_0 .. w_{N-1}, are the
raw bit patterns of its elements, zero-extended to 64 bits (16-bit words for fp16/bf16, 32 for
fp32, 64 for fp64), in this order: conv[0][0, s], conv[0][1, s], .., conv[0][L-1, s], conv[1][0,
s], .., temporal[0, s], .., temporal[L-1, s], each row in C order of its trailing dims. With all
arithmetic modulo 2^64 and `>>>` the logical shift:

    mix(z)      = splitmix64's finaliser: z ^= z >>> 30; z *= 0xBF58476D1CE4E5B9;
                  z ^= z >>> 27; z *= 0x94D049BB133111EB; z ^= z >>> 31
    S           = sum over p of mix(w_p XOR (p + 1) * 0x9E3779B97F4A7C15)
    fingerprint = mix(S + N), returned as the signed (two's complement) int64

Why this shape: integer addition is associative and commutative, so any block order, chunking
or atomic order gives the same S (determinism for free); the position salt makes moved words
count; `mix` is a bijection, so changing any single word (any single bit flip) changes its
term and hence S and the fingerprint, always, not just with high probability. It is a check
for accidents, not a cryptographic hash. Identical contents give identical fingerprints
whatever the slot ids; +0.0 and -0.0 differ in the fingerprint (different bits).

`nonfinite` counts elements whose exponent bits are all ones (NaN or +-Inf). `all_zero` is True
when every element compares equal to zero: -0.0 counts as zero (it equals 0.0, and a slot
cleared by `zero_()` and one whose state underflowed to -0.0 are both numerically empty).

Slot ids are range-checked on the host (PoolLayoutError), except ids already on the device
given to the Triton path: a check there would sync the device (wait for every queued kernel, a
forward in flight included). Those are checked on the device: an id out of range reads slot 0
instead and gives the results of an empty slot with `nonfinite` -1.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # torch-only installs (CPU wheels) keep the torch path
    triton = None

Backend = Literal["auto", "triton", "torch"]

_U64 = 1 << 64
SALT = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    """The int64 with the same low 64 bits: torch and Triton constants must fit int64."""
    value %= _U64
    return value - _U64 if value >= 1 << 63 else value


class PoolLayoutError(ValueError):
    """The pool, slot list or reference tensors are not shaped or typed as documented."""


class BackendUnavailable(RuntimeError):
    """backend="triton" was asked for where Triton cannot run."""


class WordFormat(NamedTuple):
    """How one float dtype is read as integer words."""

    word: torch.dtype
    """Unsigned where narrower than 64 bits, so that widening to int64 zero-extends."""
    exponent: int
    """Exponent bits: all set means NaN or Inf."""
    magnitude: int
    """Every bit but the sign: none set means +-0.0."""


FORMATS: dict[torch.dtype, WordFormat] = {
    torch.float16: WordFormat(torch.uint16, 0x7C00, 0x7FFF),
    torch.bfloat16: WordFormat(torch.uint16, 0x7F80, 0x7FFF),
    torch.float32: WordFormat(torch.uint32, 0x7F800000, 0x7FFFFFFF),
    torch.float64: WordFormat(torch.int64, 0x7FF0000000000000, 0x7FFFFFFFFFFFFFFF),
}


class SlotFingerprints(NamedTuple):
    fingerprint: Tensor
    """int64 [n]: the digest defined in the module docstring."""
    nonfinite: Tensor
    """int64 [n]: NaN/Inf elements; -1 for an id out of range (only device ids on the Triton
    path: see the module docstring)."""
    all_zero: Tensor
    """bool [n]: every element is +-0.0."""


# --- layout helpers shared with state_distance ------------------------------------------


def word_format(t: Tensor) -> WordFormat:
    try:
        return FORMATS[t.dtype]
    except KeyError:
        raise PoolLayoutError(f"unsupported state dtype {t.dtype}: expected one of {list(FORMATS)}") from None


def row_words(t: Tensor) -> int:
    """Elements of one slot row of one layer, after checking that the row is contiguous.

    Only the layer and slot strides may be arbitrary: the kernels read a row as one run."""
    return _row_words(tuple(t.shape), t.stride())


@functools.lru_cache(maxsize=64)
def _row_words(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """`row_words` of a layout; cached: a fingerprint call asks for each pool tensor's several
    times, and the engine's pool keeps one layout."""
    if len(shape) < 2:
        raise PoolLayoutError(f"state tensor must be [num_layers, slots, ...], got shape {shape}")
    expected = 1
    for size, stride in zip(reversed(shape[2:]), reversed(strides[2:])):
        if size > 1 and stride != expected:
            raise PoolLayoutError(f"state rows must be contiguous, got strides {strides}")
        expected *= size
    return expected


def pool_tensors(conv: list[Tensor], temporal: Tensor) -> list[Tensor]:
    """[*conv, temporal] after checking dtypes, row contiguity and a shared layer/slot shape."""
    tensors = [*conv, temporal]
    for t in tensors:
        word_format(t)
        row_words(t)
        if t.shape[:2] != temporal.shape[:2] or t.device != temporal.device:
            raise PoolLayoutError("conv and temporal must share num_layers, pool size and device")
    return tensors


def check_slots(slots: Tensor, pool: Tensor, name: str = "slots") -> Tensor:
    """`slots` as int64 on the pool's device, after a bounds check (an out-of-range id would
    make the Triton path read outside the pool and crash the engine it observes)."""
    slot_ids(slots, name)
    if slots.numel() and (int(slots.min()) < 0 or int(slots.max()) >= pool.shape[1]):
        raise PoolLayoutError(f"{name} out of range [0, {pool.shape[1]}): {slots[:16].tolist()}")
    return slots.to(device=pool.device, dtype=torch.int64)


def slot_ids(slots: Tensor, name: str = "slots") -> Tensor:
    """`slots` after checking that it is a 1-D integer tensor (no bounds: no device sync)."""
    if slots.dim() != 1 or slots.dtype.is_floating_point or slots.dtype == torch.bool:
        raise PoolLayoutError(f"{name} must be a 1-D integer tensor, got {slots.dtype} {tuple(slots.shape)}")
    return slots


def use_triton(pool: Tensor, backend: Backend) -> bool:
    """auto: Triton for CUDA tensors when Triton is installed. An explicit "triton" on CPU
    tensors only works under the Triton interpreter (TRITON_INTERPRET=1), used by the tests."""
    if backend == "torch":
        return False
    if backend == "auto":
        return pool.is_cuda and triton is not None
    if backend != "triton":
        raise ValueError(f"backend must be auto, triton or torch, not {backend!r}")
    if triton is None:
        raise BackendUnavailable("backend='triton' but Triton is not installed")
    if not pool.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailable("backend='triton' needs CUDA tensors (or TRITON_INTERPRET=1 set before importing triton)")
    return True


def chunk_layout(t: Tensor, chunk: int) -> tuple[Tensor, Tensor, Tensor]:
    """(layer, first word, word count) of every chunk of one slot's rows in `t`: each layer's
    row is cut into runs of at most `chunk` words, so a Triton program never crosses a row."""
    return _chunk_runs(t.shape[0], row_words(t), chunk)


def _chunk_runs(layers: int, row: int, chunk: int) -> tuple[Tensor, Tensor, Tensor]:
    """`chunk_layout` of `layers` rows of `row` words each."""
    per_row = -(-row // chunk)
    layer = torch.arange(layers, dtype=torch.int64).repeat_interleave(per_row)
    start = torch.arange(per_row, dtype=torch.int64).repeat(layers) * chunk
    return layer, start, (row - start).clamp(max=chunk)


def launch_shape(tensors: list[Tensor], max_block: int = 1024, max_iters: int = 8) -> tuple[int, int]:
    """(BLOCK, ITERS) for one launch: up to max_block * max_iters words per program, fewer
    for short rows so the interpreter and tiny pools do not loop over masked-out lanes."""
    longest = max(row_words(t) for t in tensors)
    block = min(max_block, triton.next_power_of_2(longest))
    return block, min(max_iters, -(-longest // block))


MAX_CHUNKS = 65535
"""CUDA's limit on grid dim 1, which enumerates a slot's chunks (slots go on dim 0, unbounded):
reached only by states over 2^29 words (2 GiB of fp32) per slot."""


def to_chunk_table(rows: list[Tensor], device: torch.device) -> Tensor:
    """The per-chunk descriptors of one launch as one int64 table on the launch device."""
    table = torch.cat(rows)
    if table.shape[0] > MAX_CHUNKS:
        raise PoolLayoutError(f"{table.shape[0]} chunks per slot exceed the grid limit {MAX_CHUNKS}")
    return table.to(device)


def launch_groups(keys: list[object]) -> list[list[int]]:
    """Indices grouped by equal key (the dtypes a kernel is specialised on), first seen first:
    one launch per group, i.e. one per tensor family in sglang pools (a family shares a dtype)."""
    groups: dict[object, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def triton_type(dtype: torch.dtype) -> tl.dtype:
    """torch.bfloat16 -> tl.bfloat16 (and uint16 etc.): same names in both."""
    return getattr(tl, str(dtype).removeprefix("torch."))


def on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Triton launches on the current CUDA device: make it the pool's (one engine process
    may see several GPUs). The interpreter runs on CPU tensors and needs nothing."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


# --- the digest ---------------------------------------------------------------------------

_LOW = {shift: (1 << (64 - shift)) - 1 for shift in (27, 30, 31)}


def mix64_(z: Tensor, scratch: Tensor | None = None) -> Tensor:
    """splitmix64's finaliser on an int64 tensor, in place (`>> k & low bits` = logical shift).
    `scratch`, shaped like z, saves an allocation per call."""
    scratch = torch.empty_like(z) if scratch is None else scratch
    for shift, multiplier in ((30, MIX1), (27, MIX2), (31, None)):
        torch.bitwise_right_shift(z, shift, out=scratch)
        z ^= scratch.bitwise_and_(_LOW[shift])
        if multiplier is not None:
            z *= _signed(multiplier)
    return z


def fingerprint_slots(conv: list[Tensor], temporal: Tensor, slots: Tensor, *, backend: Backend = "auto") -> SlotFingerprints:
    """Fingerprint, NaN/Inf count and zero flag of each slot in `slots` (1-D ids into dim 1 of
    every state tensor), over all layers of conv and temporal; results on the pool's device.

    The Triton path reads the pool in place (one launch per tensor family); the torch path
    gathers each block of slot rows once and folds it. Both give identical values."""
    tensors = pool_tensors(conv, temporal)
    triton = use_triton(temporal, backend)
    if triton and slots.device.type != "cpu":  # checked on the device (no sync)
        fold, slots = _fold_device_ids, slot_ids(slots).to(device=temporal.device, dtype=torch.int64)
    else:
        slots = check_slots(slots, temporal)
        if not triton and temporal.device.type == "cpu":
            prints = HostFold(tensors)(slots.tolist())
            return SlotFingerprints(
                *(torch.tensor(values, dtype=dtype) for values, dtype in zip(prints, (torch.int64, torch.int64, torch.bool)))
            )
        fold = _fold_triton if triton else _fold_torch
    words = sum(t.shape[0] * row_words(t) for t in tensors)
    total, nonfinite, nonzero = fold(tensors, slots)
    return SlotFingerprints(mix64_(total + words), nonfinite, nonzero == 0)


def slot_bytes(tensors: list[Tensor]) -> int:
    """Bytes of one slot's state over all layers of the pool's tensors ([layers, slots, ...])."""
    return sum(t[:, 0].numel() * t.element_size() for t in tensors)


def _positions(tensors: list[Tensor]) -> list[int]:
    """Index of each tensor's first word within a slot's word sequence."""
    offsets, offset = [], 0
    for t in tensors:
        offsets.append(offset)
        offset += t.shape[0] * row_words(t)
    return offsets


# A block of 2^18 words is 2 MiB as int64: the ~20 passes over it stay in the CPU's cache.
_TORCH_BLOCK_WORDS = 1 << 18


def _fold_torch(tensors: list[Tensor], slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(S, nonfinite, nonzero count) per slot. Each block of (slots x layers) is gathered once
    from every tensor into one int64 buffer, side by side (each dtype's words zero-extended),
    and folded with ~20 in-place integer ops, each word tested against its own dtype's masks:
    the op count does not grow with layers, tensors or dtypes, which matters more than the
    arithmetic for the few-KB slots of small models (S is a sum, so only each word's salt
    depends on where it sits)."""
    n = slots.numel()
    out = torch.zeros(3, n, dtype=torch.int64, device=slots.device)
    layers = tensors[0].shape[0]
    rows = [t.view(word_format(t).word).reshape(layers, t.shape[1], row_words(t)) for t in tensors]
    layout = tuple((offset, row.shape[2]) for offset, row in zip(_positions(tensors), rows))
    exponent, magnitude = _masks(tuple((word_format(t), row.shape[2]) for t, row in zip(tensors, rows)), slots.device)
    layer_words = sum(width for _, width in layout)
    per_layers, per_slots = _block_shape(layers, layer_words, n)
    x_buf = torch.empty(per_slots * per_layers * layer_words, dtype=torch.int64, device=slots.device)
    scratch_buf = torch.empty_like(x_buf)
    for first_layer in range(0, layers, per_layers):
        k = min(per_layers, layers - first_layer)
        salt = _salts(layout, first_layer, k, slots.device)
        for first in range(0, n, per_slots):
            count = min(per_slots, n - first)
            block = slice(first, first + count)
            x = x_buf[: count * k * layer_words].view(count, k, layer_words)
            scratch = scratch_buf[: x.numel()].view_as(x)
            column = 0
            for row in rows:
                gathered = row[first_layer : first_layer + k].index_select(1, slots[block])
                x[:, :, column : column + row.shape[2]].copy_(gathered.transpose(0, 1))  # zero-extends
                column += row.shape[2]
            # 0/1 flags kept as int64 (eq_/ne_ in place): summing bool tensors is far slower
            out[1, block] += torch.bitwise_and(x, exponent, out=scratch).eq_(exponent).sum((1, 2))
            out[2, block] += torch.bitwise_and(x, magnitude, out=scratch).ne_(0).sum((1, 2))
            x ^= salt
            out[0, block] += mix64_(x, scratch).sum((1, 2))
    return out[0], out[1], out[2]


_HOST_MIX = ((np.uint64(30), np.uint64(MIX1)), (np.uint64(27), np.uint64(MIX2)), (np.uint64(31), None))
_FEW = 16
"""Up to this many slots the final mix runs on Python ints (fewer calls than numpy's 8 ops)."""


def _mix64_host(z: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """`mix64_` on a uint64 array, in place: numpy's uint64 shift is the logical one and its
    array arithmetic wraps mod 2^64, so no masks."""
    for shift, multiplier in _HOST_MIX:
        np.right_shift(z, shift, out=scratch)
        z ^= scratch
        if multiplier is not None:
            z *= multiplier
    return z


def _digest(total: int) -> int:
    """`mix64_` of one word on Python ints, as the signed int64."""
    z = total ^ total >> 30
    z = z * MIX1 & _U64 - 1
    z ^= z >> 27
    z = z * MIX2 & _U64 - 1
    z ^= z >> 31
    return z - _U64 if z >> 63 else z


class HostPrints(NamedTuple):
    """`SlotFingerprints` as Python lists (what the host callers read)."""

    fingerprint: list[int]
    nonfinite: list[int]
    all_zero: list[bool]


class HostFold:
    """`_fold_torch` and the final mix on one CPU pool, in numpy, with everything that depends
    only on the pool (its word views, salts, masks, block shape, buffers) prepared once. On the
    few-KB slots of small models a call's cost is its count of numpy calls (each a few us, more
    with the caches cold between engine steps): about 20 here for a block of slots (a gather
    per tensor, 4 for the flags, 10 for the salted mix and its sum), where an unprepared call
    made 50. Same values as `_fold_torch`: numpy's uint64 shift is the logical one and its
    array arithmetic wraps mod 2^64, so no masks. Its buffers are reused: one thread at a time
    per instance."""

    def __init__(self, tensors: list[Tensor]) -> None:
        layers = tensors[0].shape[0]
        rows = [t.view(word_format(t).word).reshape(layers, t.shape[1], row_words(t)).numpy() for t in tensors]
        self._rows = [row.view(np.uint64) if row.dtype == np.int64 else row for row in rows]  # fp64 words: zero-extension is a no-op
        self._size = tensors[0].shape[1]
        self._layout = tuple((offset, row.shape[2]) for offset, row in zip(_positions(tensors), self._rows))
        masks = _masks(tuple((word_format(t), row.shape[2]) for t, row in zip(tensors, self._rows)), torch.device("cpu"))
        self._exponent, self._magnitude = (mask.numpy().view(np.uint64) for mask in masks)
        self._layer_words = sum(width for _, width in self._layout)
        self._words = layers * self._layer_words
        self._per_layers, self._per_slots = _block_shape(layers, self._layer_words, _TORCH_BLOCK_WORDS)
        self._salts: dict[int, np.ndarray] = {}
        self._buffers = tuple(np.empty(0, dtype=dtype) for dtype in (np.uint64, np.uint64, bool))

    @classmethod
    def of_pool(cls, conv: list[Tensor], temporal: Tensor) -> HostFold | None:
        """The fold of a CPU pool, else None: other devices, and layouts `fingerprint_slots`
        refuses (each of its calls then says why)."""
        try:
            tensors = pool_tensors(conv, temporal)
        except PoolLayoutError:
            return None
        return cls(tensors) if temporal.device.type == "cpu" else None

    def __call__(self, slots: list[int]) -> HostPrints:
        """`fingerprint_slots` of these slot ids, as lists."""
        n = len(slots)
        ids = self._ids(slots)
        layers = self._rows[0].shape[0]
        blocks = [
            (first_layer, slice(first, first + self._per_slots))
            for first_layer in range(0, layers, self._per_layers)
            for first in range(0, n, self._per_slots)
        ]
        if len(blocks) == 1:  # the usual case: no partial sums to add up
            total, nonfinite, nonzero = self._fold(0, layers, ids)
        else:
            total, nonfinite, nonzero = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
            for first_layer, block in blocks:
                part = self._fold(first_layer, min(self._per_layers, layers - first_layer), ids[block])
                total[block] += part[0]
                nonfinite[block] += part[1]
                nonzero[block] |= part[2]
        if n <= _FEW:
            digests = [_digest((value + self._words) % _U64) for value in total.tolist()]
        else:
            total += np.uint64(self._words % _U64)
            digests = _mix64_host(total, np.empty_like(total)).view(np.int64).tolist()
        return HostPrints(digests, nonfinite.tolist(), [not value for value in nonzero.tolist()])

    def zero(self, slots: list[int]) -> list[bool]:
        """`__call__(slots).all_zero` (every word +-0.0) without the fold: a gather, a mask and
        an any per tensor, where the fold makes ~20 numpy calls (a copy-on-write event with
        cleared slots and no copies needs no fingerprint)."""
        ids = self._ids(slots)
        nonzero = np.zeros(len(ids), dtype=bool)
        column = 0
        for row in self._rows:
            end = column + row.shape[2]
            nonzero |= (row[:, ids] & self._magnitude[column:end]).any(axis=(0, 2))
            column = end
        return (~nonzero).tolist()

    def _ids(self, slots: list[int]) -> np.ndarray:
        if slots and (min(slots) < 0 or max(slots) >= self._size):
            raise PoolLayoutError(f"slots out of range [0, {self._size}): {slots[:16]}")
        return np.asarray(slots, dtype=np.intp)

    def _fold(self, first_layer: int, layers: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(S, nonfinite count, any non-zero) of one block: these layers of these slots."""
        count, width = len(ids), self._layer_words
        x, scratch, flags = (b[: count * layers * width].reshape(count, layers, width) for b in self._buffer(count * layers * width))
        column = 0
        for row in self._rows:
            end = column + row.shape[2]
            if count == 1:  # the usual call: the slot's rows as a view, no gathered copy
                x[0, :, column:end] = row[first_layer : first_layer + layers, ids[0]]  # zero-extends
            else:
                x[:, :, column:end] = row[first_layer : first_layer + layers, ids].transpose(1, 0, 2)
            column = end
        # |word| bits: non-zero unless +-0.0; at least the exponent mask iff the exponent bits
        # are all ones (they are the top bits of the magnitude), i.e. NaN or Inf
        np.bitwise_and(x, self._magnitude, out=scratch)
        nonzero = scratch.reshape(count, -1).any(axis=1)
        nonfinite = np.greater_equal(scratch, self._exponent, out=flags).reshape(count, -1).sum(axis=1)
        x ^= self._salt(first_layer, layers)
        return _mix64_host(x, scratch).reshape(count, -1).sum(axis=1, dtype=np.uint64), nonfinite, nonzero

    def _salt(self, first_layer: int, layers: int) -> np.ndarray:
        salt = self._salts.get(first_layer)
        if salt is None:
            salt = self._salts[first_layer] = _salts(self._layout, first_layer, layers, torch.device("cpu")).numpy().view(np.uint64)
        return salt

    def _buffer(self, words: int) -> tuple[np.ndarray, ...]:
        """The fold's buffers, grown on first need to `words` (at most one block)."""
        if self._buffers[0].size < words:
            self._buffers = tuple(np.empty(words, dtype=b.dtype) for b in self._buffers)
        return self._buffers


@functools.lru_cache(maxsize=16)
def _masks(formats: tuple[tuple[WordFormat, int], ...], device: torch.device) -> tuple[Tensor, Tensor]:
    """[words per layer] int64 each: the exponent and magnitude masks of each word's dtype, for
    a layer row laid out as `_fold_torch` gathers it ((format, row words) per tensor). Cached
    and read-only, like `_salts`."""
    exponent = torch.cat([torch.full((width,), fmt.exponent, dtype=torch.int64, device=device) for fmt, width in formats])
    magnitude = torch.cat([torch.full((width,), fmt.magnitude, dtype=torch.int64, device=device) for fmt, width in formats])
    return exponent, magnitude


def _block_shape(layers: int, layer_words: int, slots: int) -> tuple[int, int]:
    """(layers, slots) per block: all layers of as many slots as fit the budget, or for
    big states as many layers of one slot (at least one layer row, whatever its size)."""
    per_slot = layers * layer_words
    if per_slot <= _TORCH_BLOCK_WORDS:
        return layers, max(1, min(slots, _TORCH_BLOCK_WORDS // per_slot))
    return max(1, _TORCH_BLOCK_WORDS // layer_words), 1


@functools.lru_cache(maxsize=16)
def _salts(layout: tuple[tuple[int, int], ...], first_layer: int, layers: int, device: torch.device) -> Tensor:
    """[layers, words per layer] int64: (p + 1) * SALT for each word of a block laid out as
    `_fold_torch` gathers it; `layout` is (first position, row words) per tensor. Wrapping
    int64 products are the mod 2^64 arithmetic of the definition. Cached: the engine asks
    for the same block every step. Read-only (shared between calls)."""
    layer = torch.arange(first_layer, first_layer + layers, dtype=torch.int64, device=device)[:, None]
    parts = [
        (layer * width + torch.arange(width, dtype=torch.int64, device=device) + (offset + 1)) * _signed(SALT) for offset, width in layout
    ]
    return torch.cat(parts, 1)


def _fold_device_ids(tensors: list[Tensor], ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """`_fold_triton` of slot ids not range-checked (a check of device ids on the host is a
    sync): ids out of range fold slot 0 instead, and their results become those of an empty
    slot with nonfinite -1, in three device ops."""
    valid = (ids >= 0) & (ids < tensors[0].shape[1])
    total, nonfinite, nonzero = _fold_triton(tensors, torch.where(valid, ids, 0))
    return total.where(valid, 0), nonfinite.where(valid, -1), nonzero.where(valid, 0)


FINGERPRINT_SHAPE = (512, 16)
"""(max BLOCK, max ITERS) of the fingerprint kernel: 4 words a thread at Triton's default 4
warps. On an H200 (tests/gpu/check_slot_kernels.py) 1024 x 8, 8 words a thread, folded at
about 1.2 TB/s and 512 x 16 at 2.0-2.1: the 64-bit mix is bound by registers, not memory."""


def _fold_triton(tensors: list[Tensor], slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Same as `_fold_torch`, one kernel launch per dtype group, straight from the pool."""
    n = slots.numel()
    out = torch.zeros(3, n, dtype=torch.int64, device=slots.device)
    if n == 0:
        return out[0], out[1], out[2]
    offsets = _positions(tensors)
    for group in launch_groups([t.dtype for t in tensors]):
        members = [tensors[i] for i in group]
        fmt = word_format(members[0])
        block, iters = launch_shape(members, *FINGERPRINT_SHAPE)
        layouts = tuple(
            (tensors[i].data_ptr(), tuple(tensors[i].shape), tensors[i].stride(), tensors[i].element_size(), offsets[i]) for i in group
        )
        chunks = _fingerprint_chunks(layouts, block * iters, slots.device)
        with on_device(slots.device):
            _fingerprint_kernel[(n, chunks.shape[0])](
                slots, chunks, out[0], out[1], out[2],
                WORD=triton_type(fmt.word), EXPONENT=fmt.exponent,
                MAGNITUDE=fmt.magnitude, SALT=_signed(SALT), MIX1=_signed(MIX1), MIX2=_signed(MIX2),
                BLOCK=block, ITERS=iters,
            )  # fmt: skip
    return out[0], out[1], out[2]


@functools.lru_cache(maxsize=16)
def _fingerprint_chunks(
    layouts: tuple[tuple[int, tuple[int, ...], tuple[int, ...], int, int], ...], chunk: int, device: torch.device
) -> Tensor:
    """The chunk table (row address, word count, first position, slot stride in bytes) of one
    launch group, from each member's (data_ptr, shape, strides, element size, first position).
    Cached: the engine's pool keeps its tensors, and the table took ~20 torch ops and a copy to
    the device (which waits for the device's queue) at every call: with that and slot ids sent
    from the host, a 1-slot call on an H200 went from 0.80 to 0.40 ms."""
    table = []
    for address, shape, strides, size, offset in layouts:
        row = _row_words(shape, strides)
        layer, start, count = _chunk_runs(shape[0], row, chunk)
        row_addr = address + (layer * strides[0] + start) * size
        position = offset + layer * row + start
        table.append(torch.stack([row_addr, count, position, torch.full_like(layer, strides[1] * size)], 1))
    return to_chunk_table(table, device)


if triton is not None:

    @triton.jit
    def _mix64(z, MIX1: tl.constexpr, MIX2: tl.constexpr):
        """`mix64_` for Triton: `>> k & (2^(64-k) - 1)` is the logical shift on int64."""
        z ^= (z >> 30) & 0x3FFFFFFFF
        z *= MIX1
        z ^= (z >> 27) & 0x1FFFFFFFFF
        z *= MIX2
        z ^= (z >> 31) & 0x1FFFFFFFF
        return z

    @triton.jit
    def _fingerprint_kernel(
        slots, chunks, total, nonfinite, nonzero,
        WORD: tl.constexpr, EXPONENT: tl.constexpr, MAGNITUDE: tl.constexpr,
        SALT: tl.constexpr, MIX1: tl.constexpr, MIX2: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr,
    ):  # fmt: skip
        """Program (i, c) folds chunk c (row_addr, count, position, slot_stride: bytes and
        words) of slot slots[i] into total/nonfinite/nonzero[i] with integer atomics."""
        i = tl.program_id(0)
        c = tl.program_id(1)
        slot = tl.load(slots + i)
        chunk = chunks + c * 4
        count = tl.load(chunk + 1)
        words = (tl.load(chunk) + slot * tl.load(chunk + 3)).to(tl.pointer_type(WORD))
        lanes = tl.arange(0, BLOCK)
        # salt(p) = (p + 1) * SALT, kept incrementally: one wrapping add per word, not a multiply.
        salt = (lanes.to(tl.int64) + tl.load(chunk + 2) + 1) * SALT
        block_salt = tl.full([], BLOCK, tl.int64) * SALT
        acc = tl.zeros([BLOCK], dtype=tl.int64)
        nonfinite_lanes = tl.zeros([BLOCK], dtype=tl.int32)
        nonzero_lanes = tl.zeros([BLOCK], dtype=tl.int32)
        for it in range(ITERS):
            offs = it * BLOCK + lanes
            mask = offs < count
            w = tl.load(words + offs, mask=mask, other=0)
            x = w.to(tl.int64) ^ salt  # unsigned words: zero-extended
            salt += block_salt
            acc += tl.where(mask, _mix64(x, MIX1, MIX2), 0)
            # masked lanes read 0: neither NaN/Inf nor non-zero
            nonfinite_lanes += ((w & EXPONENT) == EXPONENT).to(tl.int32)
            nonzero_lanes += ((w & MAGNITUDE) != 0).to(tl.int32)
        tl.atomic_add(total + i, tl.sum(acc, 0))
        tl.atomic_add(nonfinite + i, tl.sum(nonfinite_lanes, 0).to(tl.int64))
        tl.atomic_add(nonzero + i, tl.sum(nonzero_lanes, 0).to(tl.int64))
