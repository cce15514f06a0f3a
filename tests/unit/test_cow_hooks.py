"""T3 capture against sglang 0.5.23's real deferred copy-on-write: the hooks fingerprint the
slots right after `ModelRunner._maybe_execute_deferred_mamba_cow_and_clear` ran on a real
HybridReqToTokenPool (CPU tensors), and check cow-copy judges what they saw."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

from collections.abc import Iterator  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from sglang.srt.model_executor.forward_batch_info import ForwardMode  # noqa: E402
from sglang.srt.model_executor.model_runner import ModelRunner  # noqa: E402

from mcinspect.checks.cow_copy import check_cow_copy  # noqa: E402
from mcinspect.checks.history import StepView  # noqa: E402
from mcinspect.schema import CacheState, CowEvent, KvState, Step  # noqa: E402
from mcinspect_engine_hooks.cow_hooks import CowHooks  # noqa: E402
from mcinspect_engine_hooks.event_sink import EventSink  # noqa: E402
from mcinspect_engine_hooks.events import hook_points  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_0523 import HOOKS  # noqa: E402
from mcinspect_engine_hooks.state_log import StateLog  # noqa: E402
from mcinspect_kernels.fingerprint import fingerprint_slots  # noqa: E402

from cpu_cache import build_cache, install_hooks  # noqa: E402


@pytest.fixture
def hooked() -> Iterator[tuple[SimpleNamespace, EventSink]]:
    scheduler = build_cache()
    pool = scheduler.req_to_token_pool
    generator = torch.Generator().manual_seed(0)
    cache = pool.mamba_pool.mamba_cache
    for state in [*cache.conv, cache.temporal]:
        state.copy_(torch.randn(state.shape, generator=generator).to(state.dtype))
    sink, errors = EventSink(), ErrorCounter()
    restore = install_hooks(hook_points(sink, errors, StateLog(), [h for h in HOOKS if h.body == "cow.copy"]))
    yield SimpleNamespace(req_to_token_pool=pool, is_draft_worker=False), sink
    restore()
    assert errors.total == 0


def forward(runner: SimpleNamespace, sources: list[int], destinations: list[int], cleared: list[int]) -> None:
    """One extend forward's deferred COW / clear, through sglang's own method."""
    batch = SimpleNamespace(
        forward_mode=ForwardMode.EXTEND,
        mamba_cow_src_indices=torch.tensor(sources) if sources else None,
        mamba_cow_dst_indices=torch.tensor(destinations) if destinations else None,
        mamba_clear_indices=torch.tensor(cleared) if cleared else None,
    )
    ModelRunner._maybe_execute_deferred_mamba_cow_and_clear(runner, batch)


def slot_fingerprint(runner: SimpleNamespace, slot: int) -> int:
    cache = runner.req_to_token_pool.mamba_pool.mamba_cache
    return fingerprint_slots(list(cache.conv), cache.temporal, torch.tensor([slot])).fingerprint.item()


def test_copy_and_clear_are_fingerprinted_when_they_ran(hooked) -> None:
    runner, sink = hooked
    before = slot_fingerprint(runner, 3)
    forward(runner, [3, 4], [10, 11], [12])
    (event,) = sink.drain(Step(1))
    assert isinstance(event, CowEvent)
    assert (event.sources, event.destinations, event.cleared, event.cleared_zero) == ([3, 4], [10, 11], [12], [True])
    assert event.source_fingerprints[0] == before == event.destination_fingerprints[0]
    assert event.source_fingerprints == event.destination_fingerprints
    assert check_cow_copy(StepView.first(_state(), [event])) == []


def test_a_copy_that_did_not_happen_is_reported(hooked, monkeypatch) -> None:
    runner, sink = hooked
    monkeypatch.setattr(runner.req_to_token_pool, "copy_mamba_state", lambda src, dst: None)  # the bug: no copy
    monkeypatch.setattr(runner.req_to_token_pool.mamba_pool, "clear_slots", lambda slots: None)
    forward(runner, [3], [10], [12])
    (event,) = sink.drain(Step(1))
    violations = check_cow_copy(StepView.first(_state(), [event]))
    assert [(v.check, v.slots) for v in violations] == [("cow-copy", (10, 3)), ("cow-copy", (12,))]


@pytest.mark.parametrize("cleared_ran", [True, False])
def test_clears_without_copies_carry_their_zero_flags(hooked, monkeypatch, cleared_ran) -> None:
    """An admission without a cache hit clears and copies nothing: the event then has no
    fingerprints (they are taken without the fold), only whether each cleared slot is zero."""
    runner, sink = hooked
    if not cleared_ran:
        monkeypatch.setattr(runner.req_to_token_pool.mamba_pool, "clear_slots", lambda slots: None)
    forward(runner, [], [], [12, 5])
    (event,) = sink.drain(Step(1))
    assert (event.sources, event.cleared, event.source_fingerprints, event.destination_fingerprints) == ([], [12, 5], [], [])
    assert event.cleared_zero == [cleared_ran, cleared_ran]
    violations = check_cow_copy(StepView.first(_state(), [event]))
    assert [v.slots for v in violations] == ([] if cleared_ran else [(12,), (5,)])


def test_an_extend_forward_with_nothing_to_copy_says_so_and_decode_forwards_say_nothing(hooked) -> None:
    """Check cow-ran reads an extend forward's event, empty or not, as "its deferred copies ran"."""
    runner, sink = hooked
    forward(runner, [], [], [])
    batch = SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        mamba_cow_src_indices=torch.tensor([3]),
        mamba_cow_dst_indices=torch.tensor([10]),
        mamba_clear_indices=None,
    )
    ModelRunner._maybe_execute_deferred_mamba_cow_and_clear(runner, batch)
    (event,) = sink.drain(Step(1))
    assert (event.sources, event.destinations, event.cleared, event.source_fingerprints) == ([], [], [], [])


def test_without_fingerprints_the_copies_are_still_reported(hooked, monkeypatch) -> None:
    """Int8 checkpoints: the slots, not their prints."""
    runner, sink = hooked
    monkeypatch.setattr(CowHooks, "_fingerprints", lambda self, *slots: None)  # as where none can be taken
    forward(runner, [3], [10], [12])
    (event,) = sink.drain(Step(1))
    assert (event.sources, event.destinations, event.cleared) == ([3], [10], [12])
    assert (event.source_fingerprints, event.cleared_zero) == ([], [])
    assert check_cow_copy(StepView.first(_state(), [event])) == []  # T3 has nothing to compare


def test_a_step_nobody_observes_copies_and_emits_nothing(hooked) -> None:
    runner, sink = hooked
    sink.observed = False
    before = slot_fingerprint(runner, 3)
    forward(runner, [3], [10], [12])
    assert sink.drain(Step(1)) == []
    # sglang's own method still ran: the copy and the clear happened
    assert slot_fingerprint(runner, 10) == before != slot_fingerprint(runner, 12)
    cache = runner.req_to_token_pool.mamba_pool.mamba_cache
    assert not cache.temporal[:, 12].any()


def test_a_pool_without_translate_mamba_indices_is_read_by_its_own_slot_ids(hooked) -> None:
    """0.5.13-0.5.14's HybridReqToTokenPool has no virtual slot ids (no translate_mamba_indices)."""
    runner, _ = hooked
    older_pool = SimpleNamespace(mamba_pool=runner.req_to_token_pool.mamba_pool)
    result = CowHooks(EventSink())._fingerprints(older_pool, torch.tensor([3]), torch.tensor([10]), None)
    assert list(result.fingerprint) == [slot_fingerprint(runner, 3), slot_fingerprint(runner, 10)]


def _state() -> CacheState:
    """The checks' view needs a state; cow-copy reads only the step's events."""
    return CacheState(step=Step(1), nodes={}, slots={}, requests={}, kv=KvState(page_size=1, size=0, free_runs=[]))
