"""The engine's own forward pass as a T2 oracle: prefill a token prefix from an empty state,
alone in its batch, as an inspector-owned request the tree never sees.

`ReferencePrefill.run(tokens)` builds an sglang `Req` for `tokens`, a one-request extend
`ScheduleBatch` and its `ForwardBatch`, and runs `ModelRunner.forward` (logits only: nothing
is sampled, nothing reaches the tokenizer or the detokenizer). The request's working slot then
holds the mamba state after exactly `len(tokens)` tokens, computed from a cleared slot by the
same kernels that serve users; `compare` reads it before everything is given back.

Isolation (sglang 0.5.23; the same on 0.5.13-0.5.22, whose requests are filled as their schedulers
fill them), each enforced here rather than hoped for:
- no prefix match and no copy-on-write: the request never calls `init_next_round_input` with
  the tree, so `prefix_len` is 0 and its freshly allocated working slot is cleared by the
  forward's deferred clear;
- no insert, no eviction, no LRU or hit-count change: the batch is given an `_IsolatedTree`
  instead of the tree cache. It lends the KV allocator and page size and says the cache
  shares no prefixes, holds no mamba states and no SWA windows, so `alloc_for_extend` never
  evicts; any other attribute raises `ReferenceRefused` before sglang can touch the tree. The
  run starts only when the pools have room without evicting (`room`);
- alone in its batch: the batch holds this one request, built outside the scheduler's queues,
  so no user request can join it and the run reproduces no batch-composition bug (#37836);
- no mamba slot taken: the request computes in the pool's dummy slot 0, which sglang keeps for
  padded rows and never hands out, so a reference needs no free slot even when the tree holds
  every one (no_buffer). Its track writes are switched off (the mask of its one-request batch),
  so the state read is the prefill's final state, computed by the main kernel path (not by the
  track copy, whose bugs #30862/#24613 it must not share), and slot 0 is zeroed afterwards, as
  the pool starts it;
- nothing left behind: the KV tokens and the req_to_token row are freed, and the allocators'
  free lists are put back in their previous order, so later user requests get the pages and
  rows they would have got without the run.
The caller picks the moment (no forward in flight on an accelerator; see verify_engine.py) and
keeps the inspector's own hooks from recording the run's allocations as engine events.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from .req_kv import fields_of, kv_of

T = TypeVar("T")

DUMMY_SLOT = 0
"""sglang's dummy mamba slot: the allocator hands out 1..size, padded rows write slot 0."""
RID_PREFIX = "mcinspect-reference-"
"""Request ids of reference runs; nothing of sglang's ever sees one, but logs might."""

_counter = itertools.count()


class ReferenceRefused(Exception):
    """The reference could not run without touching what it must not (the message says what)."""


class NoRoom(ReferenceRefused):
    """The KV pool has no room for the prefix without evicting: the engine's load, not an error."""


@dataclass(frozen=True)
class ReferenceRun:
    """What one reference prefill cost."""

    tokens: int
    seconds: float


class _IsolatedTree:
    """What a reference batch sees instead of the tree cache: the allocator, nothing else.

    sglang's extend path asks the tree cache for eviction (`supports_prefix_sharing`,
    `supports_mamba`, `supports_swa` gate it), for the matched prefix's KV (`prefix_device_indices`,
    empty: nothing was matched) and for the page size. Everything else is refused loudly, so a
    future sglang that reaches further into the tree stops the reference instead of changing it.
    """

    def __init__(self, tree_cache: Any) -> None:
        self.token_to_kv_pool_allocator = tree_cache.token_to_kv_pool_allocator
        self.page_size = tree_cache.page_size

    def supports_prefix_sharing(self) -> bool:
        return False

    def supports_mamba(self) -> bool:
        return False

    def supports_swa(self) -> bool:
        return False

    def prefix_device_indices(self, req: Any) -> torch.Tensor:
        assert req.prefix_len == 0, "a reference request matches nothing"
        return torch.empty((0,), dtype=torch.int64, device=self.token_to_kv_pool_allocator.device)

    def is_chunk_cache(self) -> bool:
        """sglang 0.5.21's name for "shares no prefixes" (its eviction gate before alloc)."""
        return True

    def maybe_hand_to_session(self, req: Any) -> None:
        """No session keeps a reference request."""

    def __getattr__(self, name: str) -> Any:
        raise ReferenceRefused(f"sglang asked the tree cache for {name!r} during a reference prefill")


class ReferencePrefill:
    """Runs reference prefills in one scheduler process (scheduler thread only)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.pool = scheduler.req_to_token_pool
        self.allocator = scheduler.token_to_kv_pool_allocator
        self._tree = _IsolatedTree(scheduler.tree_cache)
        self.page_size = int(scheduler.page_size)
        self._device = self.pool.mamba_pool.mamba_cache.temporal.device

    def room(self, n_tokens: int) -> bool:
        """Whether the pools can hold a reference of `n_tokens` without evicting anything (KV for
        its tokens and a req_to_token row: its mamba state lives in the dummy slot)."""
        pages = -(-n_tokens // self.page_size) + 1
        return self.allocator.available_size() >= pages * self.page_size and self.pool.available_size() >= 1

    def run(self, tokens: Sequence[int], compare: Callable[[torch.Tensor], T]) -> tuple[T, ReferenceRun]:
        """Prefill `tokens` alone from an empty state, call `compare(working_slot)` (a 1-element
        int64 tensor: the slot holding the state after the last token) and free everything."""
        if not tokens:
            raise ReferenceRefused("the empty prefix has no state")
        if not self.room(len(tokens)):
            raise NoRoom(f"no room for {len(tokens)} tokens without evicting")
        began = time.perf_counter()
        req = self._request(tokens)
        saved = _FreeLists.save(self.allocator)
        batch = None
        try:
            batch = self._batch(req)
            self._forward(batch)
            result = compare(torch.zeros(1, dtype=torch.int64, device=self._device))
        finally:
            self._free(req, batch)
            saved.restore()
        return result, ReferenceRun(len(tokens), time.perf_counter() - began)

    def _request(self, tokens: Sequence[int]) -> Any:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams

        params = SamplingParams(max_new_tokens=1, temperature=0.0)
        params.normalize(None)
        vocab = self.scheduler.model_config.vocab_size
        req = Req(f"{RID_PREFIX}{next(_counter)}", "", array("q", tokens), params, vocab_size=vocab)
        refresh = getattr(req, "refresh_fill_ids", None) or getattr(req, "_refresh_fill_ids", None)  # 0.5.21's name
        if refresh is not None:
            refresh()
        else:  # 0.5.13 and before: what init_next_round_input sets, without its tree match
            req.full_untruncated_fill_ids = req.origin_input_ids + req.output_ids
        if hasattr(req, "set_extend_range"):  # sglang 0.5.21, 0.5.15
            req.set_extend_range(0, len(tokens))
        elif hasattr(req, "set_extend_input_len"):  # 0.5.13 and before: what PrefillAdder sets
            req.fill_len = len(tokens)
            req.set_extend_input_len(len(tokens))
        else:
            req.extend_end = len(tokens)  # the whole prefix in one extend (prefix_len stays 0)
        kv = fields_of(req)
        # The dummy slot as working and track slots: alloc() takes no slot for a request that
        # holds them already; the forward's deferred clear zeroes it first.
        kv.mamba_pool_idx = torch.tensor(DUMMY_SLOT, dtype=torch.int64, device=self._device)
        kv.mamba_needs_clear = True
        if getattr(self.pool, "enable_mamba_extra_buffer", False):
            size = self.pool.mamba_ping_pong_track_buffer_size
            kv.mamba_ping_pong_track_buffer = torch.full((size,), DUMMY_SLOT, dtype=torch.int64, device=self._device)
            if hasattr(kv, "mamba_ping_pong_empty"):  # sglang 0.5.23 (0.5.22 reads the buffer only)
                kv.mamba_ping_pong_empty = [False] * size
            kv.mamba_next_track_idx = 0
            kv.mamba_last_track_idx = self.pool.get_mamba_ping_pong_other_idx(0)
        return req

    def _batch(self, req: Any) -> Any:
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        s = self.scheduler
        batch = ScheduleBatch.init_new([req], self.pool, self.allocator, self._tree, s.model_config, False, s.spec_algorithm)
        batch.prepare_for_extend()
        if getattr(batch, "mamba_track_mask", None) is not None:  # extra_buffer: no track write
            if hasattr(batch, "mamba_prefill_track_mask_cpu"):  # 0.5.21 on (0.5.20: the device mask alone)
                batch.mamba_prefill_track_mask_cpu = [False] * len(batch.reqs)
            batch.mamba_track_mask = torch.zeros_like(batch.mamba_track_mask)
        return batch

    def _forward(self, batch: Any) -> None:
        from sglang.srt.managers.overlap_utils import resolve_forward_inputs
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch

        runner = self.scheduler.tp_worker.model_runner
        resolve_forward_inputs(batch, self.scheduler.future_map)
        forward_batch = ForwardBatch.init_new(batch, runner, **_init_new_options(ForwardBatch.init_new))
        with torch.inference_mode():
            runner.forward(forward_batch)

    def _free(self, req: Any, batch: Any) -> None:
        kv = fields_of(req)
        if batch is not None and getattr(batch, "out_cache_loc", None) is not None:
            self.allocator.free(batch.out_cache_loc)
        cache = self.pool.mamba_pool.mamba_cache
        for tensor in [*cache.conv, cache.temporal]:
            tensor[:, DUMMY_SLOT] = 0
        # Not free_mamba_cache: slot 0 was never taken from the allocator and must not enter it.
        kv.mamba_pool_idx = kv.mamba_ping_pong_track_buffer = None
        if hasattr(kv, "mamba_ping_pong_empty"):
            kv.mamba_ping_pong_empty = None
        kv.mamba_needs_clear = False
        if kv_of(req).holds_kv:
            self.pool.free(req)


@dataclass
class _FreeLists:
    """The KV allocator's free list before a reference: restored after it, when the run gave back
    exactly what it took (sglang rebinds these tensors on every alloc and free, never edits
    them). The req_to_token rows need nothing: alloc pops the last row and free appends it."""

    allocator: Any
    kv: dict[str, Any]

    FIELDS = ("free_pages", "release_pages", "staged_pages", "num_staged_pages")

    @classmethod
    def save(cls, allocator: Any) -> _FreeLists:
        return cls(allocator, {name: _copy(getattr(allocator, name)) for name in cls.FIELDS if hasattr(allocator, name)})

    def restore(self) -> None:
        before = self.kv.get("free_pages")
        if before is None:
            return
        now_free = _all_free_pages(self.allocator, self.kv)
        was_free = torch.cat([before, *_tensors(self.kv.get("release_pages")), *_tensors(self.kv.get("staged_pages"))])
        if _same_set(now_free, was_free):
            for name, value in self.kv.items():
                setattr(self.allocator, name, _copy(value))


def _all_free_pages(allocator: Any, saved: dict[str, Any]) -> torch.Tensor:
    """The allocator's free pages now: its own count where it has one (0.5.20+), else the free
    lists it had when saved, read again (0.5.19 has no get_all_free_pages)."""
    if hasattr(allocator, "get_all_free_pages"):
        return allocator.get_all_free_pages()
    return torch.cat(
        [t for name in ("free_pages", "release_pages", "staged_pages") if name in saved for t in _tensors(getattr(allocator, name))]
    )


@functools.cache
def _init_new_options(init_new: Callable[..., Any]) -> dict[str, bool]:
    """`ForwardBatch.init_new`'s keyword for hidden states before the norm, where it takes one (the
    MambaRadixCache releases read it from the batch, whose default is False); probed once."""
    takes = "return_hidden_states_before_norm" in inspect.signature(init_new).parameters
    return {"return_hidden_states_before_norm": False} if takes else {}


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _tensors(value: Any) -> list[torch.Tensor]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _same_set(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() == b.numel() and bool(torch.equal(torch.sort(a.reshape(-1)).values, torch.sort(b.reshape(-1)).values))
