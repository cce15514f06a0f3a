"""Moves requests through sglang 0.5.23's own cache calls (match, lock, allocate, checkpoint,
release, retract) in the scheduler's order, over the real cache classes of cpu_cache.py; the
forward itself does not run (slot contents stay what the test puts there)."""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import torch
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
from sglang.srt.mem_cache.base_prefix_cache import InsertParams
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.sampling.sampling_params import SamplingParams


class Driver:
    """Moves requests through sglang's own cache calls in the scheduler's order."""

    def __init__(self, scheduler: SimpleNamespace) -> None:
        self.s = scheduler
        self.tree = scheduler.tree_cache
        self.pool = scheduler.req_to_token_pool
        self.allocator = scheduler.token_to_kv_pool_allocator
        self.page = self.allocator.page_size
        self.count = 0

    def admit(self, tokens: list[int], max_new_tokens: int = 8) -> Req:
        """Match (with mamba copy-on-write), lock, take a row and slots, write the prefix."""
        return self.admit_waiting(self._request(tokens, max_new_tokens))

    def decoding(self, count: int, prompt: int) -> list[Req]:
        """`count` requests of `prompt` distinct tokens each, admitted and prefilled: ready to
        decode for as long as a bench runs."""
        reqs = []
        for i in range(count):
            req = self.admit(list(range(100 + 50 * i, 100 + 50 * i + prompt)), max_new_tokens=4000)
            self.prefill(req, prompt)
            reqs.append(req)
        return reqs

    def queue(self, tokens: list[int], max_new_tokens: int = 8) -> Req:
        """A request in the waiting queue, its prefix matched as the scheduler's policy matches
        waiting requests (no row, no slot, no lock)."""
        req = self._request(tokens, max_new_tokens)
        req.init_next_round_input(self.tree)
        self.s.waiting_queue.append(req)
        return req

    def _request(self, tokens: list[int], max_new_tokens: int) -> Req:
        self.count += 1
        return Req(
            rid=f"r{self.count}",
            origin_input_text="",
            origin_input_ids=array("q", tokens),
            sampling_params=SamplingParams(temperature=0, max_new_tokens=max_new_tokens),
        )

    def admit_waiting(self, req: Req) -> Req:
        """`admit` of a request built already (one from `queue` leaves the waiting queue)."""
        if req in self.s.waiting_queue:
            self.s.waiting_queue.remove(req)
        req.init_next_round_input(self.tree)
        req.lock = self.tree.lock(req.last_node)
        self.pool.alloc([req])
        prefix = self.tree.prefix_device_indices(req)
        self.pool.write((req.kv.req_pool_idx, slice(0, req.prefix_len)), prefix[: req.prefix_len])
        req.kv.kv_committed_len = req.kv.kv_allocated_len = req.prefix_len
        self.s.running_batch.reqs.append(req)
        return req

    def _extend(self, req: Req, end: int) -> None:
        """KV for positions [allocated, end): a new page at each page start, else the next
        token of the page the row already has (what sglang's alloc_extend/decode do)."""
        start, row = req.kv.kv_allocated_len, req.kv.req_pool_idx
        new: list[int] = []
        for pos in range(start, end):
            offset = pos % self.page
            if offset == 0:
                first = int(self.allocator.alloc(self.page)[0])
            elif not new:
                first = int(self.pool.req_to_token[row, pos - 1]) - offset + 1
            new.append(first + offset)
        self.pool.write((row, slice(start, end)), torch.tensor(new, dtype=torch.int32))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = end

    def prefill(self, req: Req, end: int) -> None:
        """One extend up to `end`: the forward consumed the COW and tracked the state at the
        last page boundary; a chunk short of the prompt is checkpointed into the tree."""
        self._extend(req, end)
        req.extend_end = end
        kv = req.kv
        kv.mamba_cow_src_index, kv.mamba_needs_clear = None, False
        if kv.mamba_ping_pong_track_buffer is not None:  # extra_buffer
            kv.mamba_last_track_idx, kv.mamba_next_track_idx = kv.mamba_next_track_idx, 1 - kv.mamba_next_track_idx
            kv.mamba_last_track_seqlen = end // self.page * self.page
        if end < len(req.origin_input_ids):
            self.s.chunked_req = req
            checkpoint_kv_cache(req, self.tree)
        else:
            self.s.chunked_req = None

    def decode(self, req: Req, tokens: list[int]) -> None:
        for token in tokens:
            req.output_ids.append(token)
            self._extend(req, req.kv.kv_allocated_len + 1)

    def finish(self, req: Req, keep_in_batch: bool = False) -> None:
        """Release into the tree; `keep_in_batch`: as at a step boundary, where the request is
        still in the batch just processed (filtered out when the next batch is built)."""
        if req.kv.mamba_ping_pong_track_buffer is not None:
            req.kv.mamba_last_track_seqlen = req.kv.kv_committed_len // self.page * self.page
        req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
        release_kv_cache(req, self.tree, checkpoint=True)
        if not keep_in_batch:
            self.s.running_batch.reqs.remove(req)

    def retract(self, req: Req) -> None:
        release_kv_cache(req, self.tree, checkpoint=False)
        req.reset_for_retract()
        self.s.running_batch.reqs.remove(req)
        self.s.waiting_queue.append(req)

    def insert(self, tokens: list[int]) -> None:
        """A raw tree insert with a fresh KV range and a fresh mamba slot."""
        value = self.allocator.alloc(len(tokens))
        slot = self.pool.mamba_allocator.alloc(1)
        self.tree.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value, mamba_value=slot))
