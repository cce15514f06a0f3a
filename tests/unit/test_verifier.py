"""The T2 verifier on sglang 0.5.23's real cache classes: every inserted state is recorded with
its prefix tokens (the insert hook, applied through sglang's HookRegistry), verified once its
forward has finished and only while its node still holds it, published once, and verifiable on
request; TP ranks run a reference together or not at all.

The oracle here is a stand-in that says every prefix's state is all zeros (the forward never
runs in these tests, so untouched slots are zeros); a test plants another state in a slot to
make it wrong. The real oracles run in tests/integration and tests/unit/test_oracle.py.
"""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import os  # noqa: E402
import tempfile  # noqa: E402
from array import array  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from cache_driver import Driver  # noqa: E402

from mcinspect.checks.recompute import tolerances  # noqa: E402
from mcinspect.schema import NodeId, SlotContent, SlotId, Step  # noqa: E402
from mcinspect_engine_hooks import extensions  # noqa: E402
from mcinspect_engine_hooks.capture import Capture  # noqa: E402
from mcinspect_engine_hooks.config import HooksConfig  # noqa: E402
from mcinspect_engine_hooks.events import EventSink, hook_points  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_0523 import HOOKS  # noqa: E402
from mcinspect_engine_hooks.state_log import CachedState, StateLog  # noqa: E402
from mcinspect_engine_hooks.verifier import Verifier  # noqa: E402
from mcinspect_engine_hooks.verify_budget import VerifyBudget  # noqa: E402

import cpu_cache  # noqa: E402


class ZeroOracle:
    """Every prefix's state is zeros, shaped like the pool (one entry per prefix)."""

    def __init__(self, scheduler: SimpleNamespace) -> None:
        self.cache = scheduler.req_to_token_pool.mamba_pool.mamba_cache
        self.asked: list[list[int]] = []

    def references(self, prefixes: Sequence[Sequence[int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
        self.asked += [list(p) for p in prefixes]
        n = len(prefixes)
        conv = [torch.zeros(c.shape[0], n, *c.shape[2:], dtype=c.dtype) for c in self.cache.conv]
        return conv, torch.zeros(self.cache.temporal.shape[0], n, *self.cache.temporal.shape[2:])


@pytest.fixture
def zero_oracle() -> Iterator[list[ZeroOracle]]:
    """ZeroOracle registered as "transformers" (the verifier's tensor oracle slot) while a test runs."""
    built: list[ZeroOracle] = []

    def factory(scheduler: SimpleNamespace) -> ZeroOracle:
        built.append(ZeroOracle(scheduler))
        return built[-1]

    saved = extensions.oracle_factory("transformers")
    extensions.register_oracle("transformers", factory)
    yield built
    if saved is not None:
        extensions.register_oracle("transformers", saved)


@pytest.fixture
def engine() -> Iterator[SimpleNamespace]:
    """sglang's cache classes (extra_buffer, page 16) with the StateLog's hooks applied."""
    s = cpu_cache.build_cache(page_size=16, mamba_slots=16)
    s.device, s.tp_size, s.tp_rank = "cpu", 1, 0
    log = StateLog()
    restore = cpu_cache.install_hooks(hook_points(EventSink(), ErrorCounter(), log, [h for h in HOOKS if h.kind == "state"]))
    capture = Capture(s, EventSink())
    capture.full_state(Step(0))
    config = HooksConfig(base_port=1, verify="transformers", verify_share=1.0, verify_working=0.0)
    s.verifier = Verifier(s, config, log, capture.slot_of, capture.path_tokens)
    s.capture, s.driver, s.log, s.verifier_config = capture, Driver(s), log, config
    yield s
    restore()


def cache_request(s: SimpleNamespace, tokens: list[int]) -> tuple[NodeId, SlotId]:
    """Prefill `tokens` through sglang's cache calls and finish: the tree takes a state at the
    last full page. Returns the (node, slot) holding it."""
    req = s.driver.admit(tokens, max_new_tokens=1)
    s.driver.prefill(req, len(tokens))
    s.driver.finish(req)
    depth = len(tokens) // 16 * 16
    for node in s.tree_cache.tree_core._node_arena.values():
        value = node.component_data[2].value  # ComponentType.MAMBA
        if value is not None and s.capture.path_tokens(node.id) == tokens[:depth]:
            return NodeId(node.id), SlotId(int(value[0]))
    raise AssertionError("the tree holds no state for the prefix")


def tree_slots(s: SimpleNamespace) -> list[int]:
    return [int(x) for x in s.tree_cache.tree_core.all_mamba_values_flatten()]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_state_is_verified_after_its_forward_and_published_once(engine: SimpleNamespace, zero_oracle: list, device: str) -> None:
    tokens = [(5 * i) % 500 + 3 for i in range(40)]
    node, slot = cache_request(engine, tokens)
    engine.device = device  # on an accelerator, the forward that wrote it may still run at this boundary
    verifier = Verifier(engine, engine.verifier_config, engine.log, engine.capture.slot_of, engine.capture.path_tokens)
    verifier.on_turn(Step(1), idle=False)
    assert verifier.stats().verified == (1 if device == "cpu" else 0)
    verifier.on_turn(Step(2), idle=False)
    assert verifier.stats().verified == 1 and verifier.stats().mismatches == 0
    assert zero_oracle[0].asked == [tokens[:32]]  # the prefix the insert saw, page-aligned
    contents, removed = verifier.after_capture({}, [], tree_slots(engine))
    record = contents[slot]
    assert (record.recompute_oracle, record.recompute_node, removed) == ("transformers", node, [])
    assert record.recompute_conv_rel_l2 == 0.0 and record.recompute_temporal_rel_l2 == 0.0
    # the same fingerprint found again by the content capture is not sent twice...
    plain = SlotContent(slot, record.fingerprint, 0, True, Step(3))
    assert verifier.after_capture({slot: plain}, [], tree_slots(engine)) == ({}, [])
    # ...unless clients dropped the record in between (its owner changed or the core hid it)
    assert verifier.after_capture({slot: plain}, [slot], tree_slots(engine)) == ({slot: plain}, [slot])


def test_a_wrong_state_is_measured_beyond_the_tolerance(engine: SimpleNamespace, zero_oracle: list) -> None:
    node, slot = cache_request(engine, [(3 * i) % 500 + 3 for i in range(50)])
    engine.req_to_token_pool.mamba_pool.mamba_cache.temporal[:, slot] = 1.0  # not the prefix's state
    engine.verifier.on_turn(Step(1), idle=False)
    record = engine.verifier.after_capture({}, [], tree_slots(engine))[0][slot]
    assert record.recompute_temporal_rel_l2 > 1e6 * tolerances("transformers")["temporal"]  # against a zero reference
    assert engine.verifier.stats().mismatches == 1


def test_a_state_that_leaves_the_tree_first_is_not_verified(engine: SimpleNamespace, zero_oracle: list) -> None:
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams

    cache_request(engine, [(9 * i) % 500 + 3 for i in range(48)])
    engine.tree_cache.evict(EvictParams(num_tokens=10_000, mamba_num=16))
    engine.verifier.on_turn(Step(1), idle=False)
    stats = engine.verifier.stats()
    assert (stats.verified, stats.gone, stats.queued) == (0, 1, 0)


def test_a_state_whose_references_run_is_still_counted_queued(
    engine: SimpleNamespace, zero_oracle: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stats reply (the request thread) while a state's references run counts it: taken out of
    the queue first, it was neither queued nor verified meanwhile, and a demo that read "0
    queued" then stopped waiting for the verifier summed one state short of its inserts."""
    cache_request(engine, [(7 * i) % 500 + 3 for i in range(40)])
    seen = []
    references = ZeroOracle.references

    def replying_meanwhile(self: ZeroOracle, prefixes: Sequence[Sequence[int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
        stats = engine.verifier.stats()
        seen.append(stats.verified + stats.gone + stats.queued)
        return references(self, prefixes)

    monkeypatch.setattr(ZeroOracle, "references", replying_meanwhile)
    engine.verifier.on_turn(Step(1), idle=False)
    stats = engine.verifier.stats()
    assert seen == [1] and (stats.verified, stats.gone, stats.queued) == (1, 0, 0)


def test_nodes_are_verified_on_request_and_unknown_ones_explained(engine: SimpleNamespace, zero_oracle: list) -> None:
    node, slot = cache_request(engine, [(13 * i) % 500 + 3 for i in range(64)])
    started = engine.verifier.start([node, NodeId(999)], everything=False)
    assert not started.done and started.results == []
    engine.verifier.on_turn(Step(1), idle=True)  # a ticket goes first, without waiting a boundary
    status = engine.verifier.status(started.ticket)
    assert status.done and status.total == 2
    by_node = {v.node: v for v in status.results}
    assert by_node[node].error == "" and by_node[node].slot == slot and by_node[node].temporal_rel_l2 == 0.0
    assert "holds no mamba state" in by_node[NodeId(999)].error


def test_the_budget_bounds_the_time_references_take_and_their_rate() -> None:
    budget = VerifyBudget(share=0.1, rate=1000.0)
    spent = 0.0
    now = 0.0
    for _ in range(10_000):  # 10 s of 1 ms turns, each reference costing 50 ms of 100 tokens
        now += 0.001
        if budget.allows(now, 100):
            budget.spent(0.05, 100)
            spent += 0.05
    assert 0.1 * 10 <= spent + 0.05 and spent <= 0.1 * 10 + 0.05 + 0.1  # the share, plus one reference
    cheap = VerifyBudget(share=0.5, rate=2.0)
    ran = 0
    for i in range(1000):  # 10 s of turns, references of 1 ms: the rate is the limit
        if cheap.allows(i * 0.01, 100):
            cheap.spent(0.001, 100)
            ran += 1
    assert 18 <= ran <= 22


def _rank_main(rank: int, init_file: str, share_of: dict[int, float], results: object) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    conv = torch.zeros(1, 4, 6, 3, dtype=torch.bfloat16)
    temporal = torch.zeros(1, 4, 2, 4, 4)
    cache = SimpleNamespace(conv=[conv], temporal=temporal)
    s = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(mamba_pool=SimpleNamespace(mamba_cache=cache)),
        device="cpu",
        tp_size=2,
        tp_rank=rank,
        tp_cpu_group=dist.group.WORLD,
    )
    extensions.register_oracle("transformers", ZeroOracle)
    config = HooksConfig(base_port=1, verify="transformers", verify_share=1.0, verify_working=0.0)
    verifier = Verifier(s, config, StateLog(), lambda node: 1, lambda node: None)
    if share_of[rank] == 0:  # this rank's own budget is spent: it would not run a reference
        verifier.budget.allows(0.0, 1)
        verifier.budget.spent(1e9, 1)
    verifier._take_in([CachedState(SlotId(1), NodeId(5), array("i", [3, 4, 5]), Step(0), "r", None)])
    verifier.on_turn(Step(1), idle=False)
    results[rank] = verifier.stats().verified  # type: ignore[index]
    dist.destroy_process_group()


@pytest.mark.parametrize(("shares", "expected"), [({0: 1.0, 1: 0.0}, 1), ({0: 0.0, 1: 1.0}, 0)])
def test_tp_ranks_follow_rank_zero(shares: dict[int, float], expected: int) -> None:
    """Rank 0's decision wins on every rank, so their reference forwards' collectives pair up."""
    with tempfile.TemporaryDirectory() as scratch:
        results = mp.Manager().dict()
        # fork: the children inherit this module (spawn would have to import it by its test path)
        mp.start_processes(_rank_main, args=(os.path.join(scratch, "init"), shares, results), nprocs=2, start_method="fork")
        assert dict(results) == {0: expected, 1: expected}
