"""A host copy of the raw state bits each fingerprint was computed from, so that a recheck of a
slot whose bits have not moved since keeps its fingerprint without hashing it again.

A fingerprint, its NaN/Inf count and its zero flag are functions of the slot's raw bits
(mcinspect_kernels.fingerprint), so equal bits give the recorded values exactly: comparing the
bits is the same check, at a tenth of the cost on the few-KB slots of small CPU models (a
gather and a compare a tensor, where the fold is ~20 passes). Only for pools in host memory and
up to MAX_BYTES: the copy doubles the pool's memory (and its compare buffer takes a byte a
word), and on a GPU the fold reads the pool in place anyway.
"""

from __future__ import annotations

import numpy as np
import torch

from mcinspect_kernels.fingerprint import FORMATS

MAX_BYTES = 64 << 20
"""Largest pool (all state tensors) mirrored."""


def _widest(rows: np.ndarray) -> np.ndarray:
    """Byte rows [layers, slots, bytes] as the widest unsigned words that divide a row."""
    width = next(w for w in (8, 4, 2, 1) if rows.shape[2] % w == 0)
    return rows.view(f"u{width}")


class ContentMirror:
    """Per slot: the bits of its last fingerprint, valid until `forget` (its owner changed)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        # [layers, slots, words] views of the pool as unsigned words: bit patterns, not floats
        # (NaN != NaN, -0.0 == 0.0 would make a float compare wrong both ways); the widest
        # words that tile a row (equal bits either way), fewer words to gather and compare.
        self._pool = [_widest(t.view(torch.uint8).view(t.shape[0], t.shape[1], -1).numpy()) for t in tensors]
        # The copies in the pool's own layout, so that a compare of the whole pool runs over
        # both contiguously, into a buffer kept for it (a byte a word).
        self._copy = [np.zeros_like(view) for view in self._pool]
        self._differs = [np.empty(view.shape, dtype=bool) for view in self._pool]
        self._valid = np.zeros(tensors[0].shape[1], dtype=bool)

    @classmethod
    def of_pool(cls, tensors: list[torch.Tensor]) -> ContentMirror | None:
        """A mirror of a host pool within MAX_BYTES, else None (fingerprint every recheck)."""
        host = all(t.device.type == "cpu" and t.dtype in FORMATS for t in tensors)
        if not host or sum(t.numel() * t.element_size() for t in tensors) > MAX_BYTES:
            return None
        try:
            return cls(tensors)
        except (RuntimeError, ValueError):  # a layout numpy cannot view (rows not contiguous)
            return None

    def unchanged(self, slots: list[int]) -> list[bool]:
        """Per slot: its bits equal those of its last fingerprint (and that one is still valid)."""
        ids = np.asarray(slots, dtype=np.int64)
        if 2 * len(ids) >= len(self._valid):
            # Most of the pool: compare all of it in place (half the numpy calls of gathering
            # the slots first), then pick.
            same = self._valid.copy()
            for pool, copy, differs in zip(self._pool, self._copy, self._differs):
                np.not_equal(pool, copy, out=differs)
                same &= ~differs.any(axis=(0, 2))
            return same[ids].tolist()
        same = self._valid[ids]
        for pool, copy in zip(self._pool, self._copy):
            same &= (pool[:, ids] == copy[:, ids]).all(axis=(0, 2))
        return same.tolist()

    def store(self, slots: list[int]) -> None:
        """Record the bits `slots` hold now: the ones just fingerprinted."""
        ids = np.asarray(slots, dtype=np.int64)
        for pool, copy in zip(self._pool, self._copy):
            copy[:, ids] = pool[:, ids]
        self._valid[ids] = True

    def forget(self, slots: list[int]) -> None:
        """Their fingerprints were dropped (owner changed): the next recheck hashes them."""
        self._valid[np.asarray(slots, dtype=np.int64)] = False
