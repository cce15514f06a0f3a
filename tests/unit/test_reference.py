"""The engine oracle's reference request is isolated: on sglang 0.5.23's real cache classes (tree,
pools, allocators on CPU tensors) it matches nothing, copies nothing from the tree, inserts
nothing, evicts nothing, runs alone in its batch and leaves every free list as it found it.

The model forward is the one part replaced here (the tests of tests/integration run the real
one): it writes a known pattern into the working slot, so the comparison can be seen to read
the state the forward left there.
"""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

from array import array  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import InsertParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

from mcinspect.schema import Step  # noqa: E402
from mcinspect_engine_hooks.capture import Capture  # noqa: E402
from mcinspect_engine_hooks.events import EventSink  # noqa: E402
from mcinspect_engine_hooks.reference import RID_PREFIX, ReferencePrefill, ReferenceRefused, _IsolatedTree  # noqa: E402

import cpu_cache  # noqa: E402  (tests/support: sglang's real cache classes on CPU tensors)

PATTERN = 0.25


def scheduler(page_size: int, kv_size: int = 1024, mamba_slots: int = 12) -> SimpleNamespace:
    s = cpu_cache.build_cache(page_size=page_size, kv_size=kv_size, mamba_slots=mamba_slots)
    s.model_config = SimpleNamespace(vocab_size=512, hf_text_config=SimpleNamespace(), is_encoder_decoder=False)
    s.spec_algorithm = SpeculativeAlgorithm.NONE
    s.page_size = page_size
    return s


def cache_prefix(s: SimpleNamespace, tokens: list[int]) -> int:
    """Insert `tokens` into the tree with a KV range and a mamba slot of its own; returns the slot."""
    value = s.token_to_kv_pool_allocator.alloc(len(tokens))
    slot = s.req_to_token_pool.mamba_allocator.alloc(1)
    s.tree_cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value, mamba_value=slot))
    return int(slot[0])


class Recorder(ReferencePrefill):
    """A ReferencePrefill whose forward writes PATTERN into the working slot, and which keeps
    the batch and request it built for the assertions."""

    def _forward(self, batch: Any) -> None:
        self.batch = batch
        self.req = batch.reqs[0]
        cache = self.pool.mamba_pool.mamba_cache
        slot = self.working = int(self.req.kv.mamba_pool_idx)
        self.req_track_slots = [int(x) for x in self.req.kv.mamba_ping_pong_track_buffer if x >= 0]
        for tensor in [*cache.conv, cache.temporal]:
            tensor[:, [slot, *self.req_track_slots]] = PATTERN  # the forward writes the working and track slots


def free_lists(s: SimpleNamespace) -> tuple[list[int], list[int], list[int]]:
    """Every free list in allocation order: mamba slots, KV pages, req_to_token rows."""
    allocator = s.token_to_kv_pool_allocator
    return (
        s.req_to_token_pool.mamba_allocator.free_slots.tolist(),
        allocator.get_all_free_pages().tolist(),
        list(s.req_to_token_pool.free_slots),
    )


@pytest.mark.parametrize("page_size", [1, 16])
def test_a_reference_leaves_the_tree_and_the_pools_as_they_were(page_size: int) -> None:
    s = scheduler(page_size)
    prompt = [(7 * i) % 500 + 3 for i in range(96)]
    cache_prefix(s, prompt[:64])
    cache_prefix(s, prompt[:32] + [9] * 32)
    before = Capture(s, EventSink()).full_state(Step(0))
    lists = free_lists(s)
    ref = Recorder(s)
    seen: list[float] = []

    def compare(working: torch.Tensor) -> int:
        seen.append(float(s.req_to_token_pool.mamba_pool.mamba_cache.temporal[0, int(working[0])].flatten()[0]))
        return int(working[0])

    working, run = ref.run(prompt, compare)
    assert seen == [PATTERN] and run.tokens == len(prompt)
    after = Capture(s, EventSink()).full_state(Step(0))
    assert after.nodes == before.nodes  # keys, values, lock refs, LRU, hit counts, last access
    assert after.slots == before.slots and after.kv == before.kv and not after.requests
    assert free_lists(s) == lists  # the very same order: later requests get the same slots
    assert working not in [int(x) for x in s.tree_cache.tree_core.all_mamba_values_flatten()]
    cache = s.req_to_token_pool.mamba_pool.mamba_cache
    assert working == ref.working == 0 and ref.req_track_slots == [0, 0]  # the dummy slot: no slot taken
    assert all(not t[:, 0].any() for t in [*cache.conv, cache.temporal])  # zeroed again, as the pool starts it
    mask = ref.batch.mamba_track_mask  # None where sglang's execution config has no extra buffer
    assert mask is None or (not mask.any() and ref.batch.mamba_prefill_track_mask_cpu == [False])  # no track write


def test_a_reference_matches_nothing_and_copies_nothing_even_over_a_cached_prefix() -> None:
    s = scheduler(16)
    prompt = [(11 * i) % 500 + 3 for i in range(80)]
    cached = cache_prefix(s, prompt[:64])
    ref = Recorder(s)
    ref.run(prompt, lambda working: None)
    req, batch = ref.req, ref.batch
    assert req.rid.startswith(RID_PREFIX) and batch.reqs == [req]  # alone in its batch
    assert req.prefix_len == 0 and batch.prefix_lens == [0] and batch.extend_lens == [len(prompt)]
    assert batch.mamba_cow_src_indices is None  # nothing copied from slot `cached`
    assert batch.mamba_clear_indices.tolist() == [0]  # the forward starts from the cleared dummy slot
    assert req.kv.mamba_pool_idx is None and req.kv.req_pool_idx is None  # and gives everything back
    assert cached in [int(x) for x in s.tree_cache.tree_core.all_mamba_values_flatten()]


def test_without_room_a_reference_is_refused_and_nothing_is_evicted() -> None:
    s = scheduler(16, kv_size=256, mamba_slots=3)
    for i in range(3):  # 3 x 64 of 256 KV tokens cached, all of it evictable; every mamba slot in the tree
        cache_prefix(s, [i + 3] * 64)
    before = Capture(s, EventSink()).full_state(Step(0))
    ref = ReferencePrefill(s)
    assert ref.room(32) and not ref.room(100)  # KV decides: the state lives in the dummy slot
    with pytest.raises(ReferenceRefused, match="no room"):
        ref.run(list(range(3, 103)), lambda working: None)
    assert Capture(s, EventSink()).full_state(Step(0)).nodes == before.nodes


def test_the_isolated_tree_lends_the_allocator_and_refuses_the_rest() -> None:
    s = scheduler(16)
    isolated = _IsolatedTree(s.tree_cache)
    assert isolated.token_to_kv_pool_allocator is s.token_to_kv_pool_allocator
    assert not (isolated.supports_prefix_sharing() or isolated.supports_mamba() or isolated.supports_swa())
    for name in ("insert", "match_prefix", "evict", "evict_for_alloc", "lock", "checkpoint_into_tree"):
        with pytest.raises(ReferenceRefused, match=name):
            getattr(isolated, name)


def test_a_failed_forward_still_gives_everything_back() -> None:
    s = scheduler(16)
    lists = free_lists(s)

    class Failing(ReferencePrefill):
        def _forward(self, batch: Any) -> None:
            raise RuntimeError("the model failed")

    with pytest.raises(RuntimeError, match="the model failed"):
        Failing(s).run(list(range(3, 70)), lambda working: None)
    assert free_lists(s) == lists
