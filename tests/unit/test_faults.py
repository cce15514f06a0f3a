"""The fault library: complete, inert unless asked, and each fault changes real sglang behaviour.

Faults are applied through sglang's HookRegistry, as in the engine, and undone after each
test. Behaviour is checked on sglang 0.5.23's real cache classes over CPU tensors (the pools,
allocator and UnifiedRadixCache that `cpu_cache.build_cache` builds), driven through sglang's
own match / checkpoint / release calls; the prefill tracking faults against sglang's track
plan and the torch CPU kernel the embedded engine runs. Two fresh interpreters check the
MCINSPECT_FAULT path itself; the end-to-end demo runs are marked slow.
"""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import: CPU stand-ins for CUDA-only imports

import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pkgutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from array import array  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from fault_support import applied  # noqa: E402
from fault_support import both as _both  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req, _gather_mamba_track_indices  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

from mcinspect.checks import CHECKS  # noqa: E402
from mcinspect_engine_hooks.cpu_engine import faults  # noqa: E402
from mcinspect_engine_hooks.cpu_engine.faults import (  # noqa: E402
    FAULTS,
    RECOMPUTE_CHECK,
    FaultError,
    install_fault_from_env,
)
from mcinspect_engine_hooks.cpu_engine.launcher import STRATEGIES, EmbeddedEngineConfig  # noqa: E402
from mcinspect_engine_hooks.cpu_engine.workload import Workload, WorkloadShape  # noqa: E402
from mcinspect_kernels.cpu_ops.gated_delta_rule import CHUNK_SIZE, chunk_gated_delta_rule_cpu  # noqa: E402

import cpu_cache  # noqa: E402  (tests/support: sglang's real cache classes on CPU tensors)
from engine_runs import FAULT_MATRIX, MCINSPECT, opt_in  # noqa: E402

EXPECTED = {
    "tp-desync",
    "wrong-chunk-state",
    "zero-initial-state",
    "track-off-by-one",
    "depth-mismatch",
    "unwritten-slot",
    "ghost-node",
    "leak-slot",
    "double-owner",
    "overwrite-cached",
    "dropped-cow",
    "mixed-track-dropped",
    "decode-write-to-padding",
    "stray-track-write",
}
PAGE = 16
GRID = 64  # lcm(mamba chunk 64, page 16): where extra_buffer tracks prefill states


# ---------------------------------------------------------------- registry and activation


def test_registry_is_complete_and_consistent() -> None:
    assert set(FAULTS) == EXPECTED
    assert RECOMPUTE_CHECK in CHECKS
    for name, fault in FAULTS.items():
        assert fault.name == name
        assert fault.upstream and fault.description and fault.trigger
        assert fault.expected_checks and set(fault.expected_checks) <= set(CHECKS), name
        assert fault.strategies and set(fault.strategies) <= set(STRATEGIES), name
        assert fault.applies_to("extra_buffer", PAGE), f"{name} must reproduce on the main target"
        assert fault.hooks and len(fault.targets) == len(fault.hooks), name
        for hook in fault.hooks:
            assert hook.kind in ("before", "after", "around", "replace")
            owner_path, attr = hook.target.rsplit(".", 1)
            assert hasattr(pkgutil.resolve_name(owner_path), attr), f"{hook.target} is gone from sglang"


def test_applicability() -> None:
    assert FAULTS["depth-mismatch"].applies_to("no_buffer", 1)
    assert not FAULTS["double-owner"].applies_to("no_buffer", 1)
    assert FAULTS["double-owner"].applies_to("extra_buffer_lazy", 1)


def test_no_fault_named_patches_nothing() -> None:
    meta_path, hooks = list(sys.meta_path), dict(HookRegistry._hooks)
    assert install_fault_from_env({}) is None
    assert install_fault_from_env({faults.ENV_VAR: ""}) is None
    assert sys.meta_path == meta_path and dict(HookRegistry._hooks) == hooks


def test_unknown_fault_is_a_clear_error_before_any_patch() -> None:
    meta_path, hooks = list(sys.meta_path), dict(HookRegistry._hooks)
    with pytest.raises(FaultError, match="unknown fault 'nope'.*wrong-chunk-state"):
        install_fault_from_env({faults.ENV_VAR: "nope"})
    assert sys.meta_path == meta_path and dict(HookRegistry._hooks) == hooks


REGISTERED = textwrap.dedent(
    """
    from mcinspect_engine_hooks.cpu_engine import patches
    patches.install()  # what the .pth runs at interpreter start
    import sys
    assert "sglang" not in sys.modules  # registration waits for sglang's own import
    from sglang.srt.plugins.hook_registry import HookRegistry
    print(sorted(HookRegistry._hooks))
    """
)


@pytest.mark.parametrize("fault", [None, "double-owner"])
def test_env_var_registers_hooks_in_a_fresh_engine_process(fault: str | None) -> None:
    """As in a scheduler process: the fault reaches sglang's HookRegistry only when named."""
    environ = {k: v for k, v in os.environ.items() if k != faults.ENV_VAR} | {"MCINSPECT_CPU_ENGINE": "1"}
    if fault:
        environ[faults.ENV_VAR] = fault
    done = subprocess.run([sys.executable, "-c", REGISTERED], env=environ, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(sorted(FAULTS[fault].targets) if fault else [])


CHOSEN_AT_APPLY = textwrap.dedent(
    """
    from mcinspect_engine_hooks.cpu_engine import patches
    patches.install()
    from sglang.srt.plugins.hook_registry import HookRegistry
    before = sorted(HookRegistry._hooks)
    HookRegistry.apply_hooks()  # what load_plugins runs once sglang has imported
    print(before, sorted(HookRegistry._hooks), sorted(HookRegistry._patched))
    """
)


def test_a_hook_with_a_fallback_is_chosen_when_the_hooks_are_applied() -> None:
    """depth-mismatch's target exists only in 0.5.21+: which one this sglang has is probed when
    HookRegistry applies the hooks (probing while the registry imports is a circular import)."""
    environ = os.environ | {"MCINSPECT_CPU_ENGINE": "1", faults.ENV_VAR: "depth-mismatch"}
    done = subprocess.run([sys.executable, "-c", CHOSEN_AT_APPLY], env=environ, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    target = FAULTS["depth-mismatch"].hooks[0].target
    assert done.stdout.strip() == f"[] {[target]} {[target]}"


def test_a_missing_target_falls_back_to_the_older_release_one() -> None:
    hook = FAULTS["depth-mismatch"].hooks[0]
    assert hook.chosen() is hook  # 0.5.23 has floor_cache_len
    gone = dataclasses.replace(hook, target="sglang.srt.mem_cache.no_such_module.MambaComponent.floor_cache_len")
    assert gone.chosen() is hook.fallback  # 0.5.20: after prepare_for_caching_req
    older = dataclasses.replace(gone, fallback=dataclasses.replace(hook.fallback, target=gone.target))
    release_0519, release_0516 = hook.fallback.fallback, hook.fallback.fallback.fallback
    assert release_0519.target.endswith("components.mamba_component.MambaComponent.prepare_for_caching_req")
    assert release_0516.target.endswith("unified_cache_components.mamba_component.MambaComponent.prepare_for_caching_req")
    release_mrc = release_0516.fallback  # 0.5.10-0.5.15: before both of MambaRadixCache's caching calls
    assert release_mrc.target.endswith("mamba_radix_cache.MambaRadixCache.cache_unfinished_req")
    assert [also.target.rsplit(".", 1)[1] for also in release_mrc.also] == ["cache_finished_req"]
    assert older.chosen() is release_mrc  # no older module in 0.5.23: the last row stands


def test_a_target_without_its_feature_falls_back() -> None:
    """0.5.15 ships 0.5.16's MambaComponent module unused: the feature (int8_ckpt_pool) decides."""
    hook = FAULTS["track-off-by-one"].hooks[0]
    assert hook.chosen() is hook
    with_feature = dataclasses.replace(hook, feature=f"{hook.target.rsplit('.', 1)[0]}.int8_ckpt_pool")
    assert with_feature.chosen() is with_feature  # 0.5.23's MambaComponent has it
    without = dataclasses.replace(hook, feature="sglang.srt.mem_cache.no_such_module.MambaComponent.int8_ckpt_pool")
    assert without.chosen() is hook.fallback.chosen()  # the chain's end in 0.5.23: MambaRadixCache's row
    assert without.chosen().target.endswith("MambaRadixCache.cache_unfinished_req")


# ---------------------------------------------------------------- applying a fault in-process


# ---------------------------------------------------------------- the real cache, driven


class Engine:
    """sglang's real pools and UnifiedRadixCache (extra_buffer, page 16), moved through
    sglang's own cache calls with the bookkeeping the scheduler and model runner do."""

    def __init__(self) -> None:
        built = cpu_cache.build_cache(page_size=PAGE, mamba_slots=24)
        self.tree, self.pool, self.kv = built.tree_cache, built.req_to_token_pool, built.token_to_kv_pool_allocator
        self.count = 0

    def admit(self, tokens: list[int]) -> Req:
        """Match (with mamba copy-on-write), lock, take a row and mamba slots, map the prefix."""
        self.count += 1
        req = Req(
            rid=f"r{self.count}",
            origin_input_text="",
            origin_input_ids=array("q", tokens),
            sampling_params=SamplingParams(temperature=0, max_new_tokens=8),
        )
        req.init_next_round_input(self.tree)
        req.lock = self.tree.lock(req.last_node)
        self.pool.alloc([req])
        prefix = self.tree.prefix_device_indices(req)[: req.prefix_len]
        self.pool.write((req.kv.req_pool_idx, slice(0, req.prefix_len)), prefix)
        req.kv.kv_committed_len = req.kv.kv_allocated_len = req.prefix_len
        return req

    def prefill(self, req: Req, end: int) -> None:
        """One extend to `end`, tracking the state at the last grid point past the prefix (as
        `_mamba_radix_cache_v2_req_prepare_for_extend` plans it); a chunk is checkpointed."""
        start = req.kv.kv_allocated_len
        pages = self.kv.alloc((end - start + PAGE - 1) // PAGE * PAGE)
        self.pool.write((req.kv.req_pool_idx, slice(start, end)), pages[: end - start].to(torch.int32))
        req.kv.kv_committed_len = req.kv.kv_allocated_len = end
        req.extend_end = end
        kv = req.kv
        kv.mamba_cow_src_index, kv.mamba_needs_clear = None, False
        if end - start >= GRID:
            kv.mamba_last_track_idx, kv.mamba_next_track_idx = kv.mamba_next_track_idx, 1 - kv.mamba_next_track_idx
            kv.mamba_last_track_seqlen = start + (end - start) // GRID * GRID
        if end < len(req.origin_input_ids):
            checkpoint_kv_cache(req, self.tree)

    def finish(self, req: Req, outputs: int = 0) -> None:
        """Decode `outputs` tokens (no track boundary), then release as the scheduler does."""
        if outputs:
            self.prefill(req, req.kv.kv_allocated_len + outputs)
            req.output_ids.extend([7] * outputs)
        req.finished_reason = FINISH_LENGTH(length=outputs)
        release_kv_cache(req, self.tree, checkpoint=True)

    def mamba_nodes(self) -> dict[int, int]:
        """Depth -> slot of every node holding a mamba state (Python tree core)."""
        found, stack = {}, [(self.tree.tree_core.root_node, 0)]
        while stack:
            node, depth = stack.pop()
            value = node.component_data[ComponentType.MAMBA].value
            if value is not None:
                found[depth] = int(value[0])
            stack += [(child, depth + len(child.key)) for child in node.children.values()]
        return found

    def free_slots(self) -> set[int]:
        return set(self.pool.mamba_allocator.free_slots.tolist())


def _tokens(n: int, base: int = 10) -> list[int]:
    return [base + i % 400 for i in range(n)]


def test_track_off_by_one_credits_the_state_a_page_deeper() -> None:
    def run() -> dict[int, int]:
        engine = Engine()
        req = engine.admit(_tokens(100))
        engine.prefill(req, 100)  # the state at 64 is tracked
        engine.finish(req, outputs=4)
        return engine.mamba_nodes()

    clean, faulty = _both("track-off-by-one", run)
    assert list(clean) == [GRID]
    assert list(faulty) == [GRID + PAGE] and faulty[GRID + PAGE] == clean[GRID]


def test_depth_mismatch_stamps_the_state_a_page_shallower() -> None:
    def run() -> dict[int, int]:
        engine = Engine()
        req = engine.admit(_tokens(100))
        engine.prefill(req, 100)
        engine.finish(req, outputs=4)
        return engine.mamba_nodes()

    clean, faulty = _both("depth-mismatch", run)
    assert list(clean) == [GRID]
    assert list(faulty) == [GRID - PAGE] and faulty[GRID - PAGE] == clean[GRID]


def test_leak_slot_keeps_the_working_slot_out_of_the_free_list() -> None:
    def run() -> tuple[set[int], set[int], int]:
        engine = Engine()
        everything = engine.free_slots()
        req = engine.admit(_tokens(100))
        working = int(req.kv.mamba_pool_idx)
        engine.prefill(req, 100)
        engine.finish(req, outputs=4)
        owned = set(engine.mamba_nodes().values())
        return everything - engine.free_slots() - owned, owned, working

    (clean_lost, _, _), (faulty_lost, owned, working) = _both("leak-slot", run)
    assert clean_lost == set()
    assert faulty_lost == {working} and working not in owned


def _donate_one_chunk(engine: Engine) -> tuple[Req, int, int]:
    """A 300-token prompt whose first 128-token chunk is checkpointed: (req, donated slot,
    its ping-pong position)."""
    req = engine.admit(_tokens(300))
    engine.prefill(req, 128)
    position = req.kv.mamba_last_track_idx
    return req, engine.mamba_nodes()[128], position


def test_double_owner_leaves_the_donated_slot_in_the_ping_pong() -> None:
    def run() -> tuple[int, list[int], list[int]]:
        engine = Engine()
        req, donated, _ = _donate_one_chunk(engine)
        mirror = engine.pool.req_index_to_mamba_ping_pong_track_buffer_mapping[req.kv.req_pool_idx]
        return donated, req.kv.mamba_ping_pong_track_buffer.tolist(), mirror.tolist()

    (clean_slot, clean_buffer, _), (slot, buffer, mirror) = _both("double-owner", run)
    assert clean_slot not in clean_buffer
    assert slot in buffer and buffer == mirror


def test_overwrite_cached_routes_the_next_track_write_into_the_tree_slot() -> None:
    def run() -> tuple[int, list[int], int]:
        engine = Engine()
        req, donated, position = _donate_one_chunk(engine)
        pool = engine.pool
        # where the next track write at that ping-pong position goes (sglang's own gather)
        destination = _gather_mamba_track_indices(
            pool.req_index_to_mamba_ping_pong_track_buffer_mapping,
            torch.tensor([req.kv.req_pool_idx]),
            torch.tensor([position]),
        )
        return donated, req.kv.mamba_ping_pong_track_buffer.tolist(), int(destination[0])

    (clean_slot, clean_buffer, clean_dst), (slot, buffer, dst) = _both("overwrite-cached", run)
    assert clean_dst != clean_slot and clean_dst in clean_buffer
    assert slot not in buffer, "the request's own record is right"
    assert dst == slot, "but the track write lands in the slot the tree owns"


def test_ghost_node_becomes_the_cow_source_of_unrelated_requests() -> None:
    def run() -> tuple[dict[int, int], Any]:
        engine = Engine()
        short = engine.admit(_tokens(40))  # under the 64-token grid: nothing to cache
        engine.prefill(short, 40)
        engine.finish(short, outputs=4)
        other = engine.admit(_tokens(50, base=300))
        return engine.mamba_nodes(), other.kv.mamba_cow_src_index

    (clean_nodes, clean_src), (nodes, src) = _both("ghost-node", run)
    assert clean_nodes == {} and clean_src is None
    assert list(nodes) == [0], "a state on the depth-0 (empty-key) node"
    assert src is not None and int(src) == nodes[0]


def test_dropped_cow_loses_the_copy_of_a_short_hit_only() -> None:
    """The scheduler consumes a hit's copy-on-write (sglang's own collector), but the batch the
    forward reads carries no copy for a hit whose run caches nothing; a longer hit keeps its."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    def run() -> tuple[list[int] | None, list[int] | None, list[Any]]:
        engine = Engine()
        first = engine.admit(_tokens(100))
        engine.prefill(first, 100)  # caches the state at 64
        engine.finish(first)
        short = engine.admit(_tokens(70))  # hit 64 + 6 tokens + 8 new: no boundary up to 128
        short.extend_end = 70
        long = engine.admit(_tokens(100) + _tokens(60, base=200))  # crosses 128: it caches
        long.extend_end = 160
        batch = SimpleNamespace(tree_cache=engine.tree)
        ScheduleBatch._collect_deferred_mamba_cow_and_clear(batch, [short, long])
        dst = batch.mamba_cow_dst_indices
        return (
            (None if dst is None else dst.tolist()),
            [int(short.kv.mamba_pool_idx), int(long.kv.mamba_pool_idx)],
            [short.kv.mamba_cow_src_index, short.kv.mamba_needs_clear],
        )

    (clean_dst, clean_slots, clean_after), (dst, slots, after) = _both("dropped-cow", run)
    assert clean_dst == clean_slots  # both hits copy their cached state
    assert dst == [slots[1]]  # the short hit's copy is gone, the long one's kept
    assert after == clean_after == [None, False]  # consumed all the same: no clear replaces it


# ---------------------------------------------------------------- the prefill tracking path


def _two_request_batch() -> tuple[torch.Tensor, list[int]]:
    """Chunk states `h` of the CPU kernel for two 100-token requests prefilled together."""
    torch.manual_seed(0)
    tokens, heads, dim = 200, 2, 8
    q, k = torch.randn(1, tokens, heads, dim), torch.randn(1, tokens, heads, dim)
    v = torch.randn(1, tokens, heads, dim)
    g, beta = -torch.rand(1, tokens, heads), torch.rand(1, tokens, heads)
    cu = torch.tensor([0, 100, 200])
    _, _, h = chunk_gated_delta_rule_cpu(q, k, v, g, beta, cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
    # request 1 alone, first 64 tokens: the state its checkpoint must hold
    _, alone, _ = chunk_gated_delta_rule_cpu(
        q[:, 100:164], k[:, 100:164], v[:, 100:164], g[:, 100:164], beta[:, 100:164], use_qk_l2norm_in_kernel=True
    )
    return h.squeeze(0), [alone[0]]


def test_workload_packs_short_and_long_prompts_into_one_prefill_chunk() -> None:
    """wrong-chunk-state needs a tracked request behind an unaligned one in the same batch."""
    shape, budget = WorkloadShape(), EmbeddedEngineConfig().chunked_prefill_size
    assert shape.packed_short_len[1] + shape.packed_long_len[1] <= budget
    packed = [wave for wave in Workload(seed=0, total_requests=40).waves() if wave[0].kind == "packed"]
    assert packed
    for wave in packed:
        for short, long in zip(wave[::2], wave[1::2]):
            assert len(short.input_ids) % CHUNK_SIZE and len(long.input_ids) > CHUNK_SIZE


def test_wrong_chunk_state_gathers_another_chunk_for_the_second_request() -> None:
    from sglang.srt.layers.attention.mamba import prefill_track_metadata as plans

    h, (truth,) = _two_request_batch()

    def run() -> list[int]:
        plan = plans.build_prefill_track_plan([True, True], [100, 100], [100, 100], [0, 0], CHUNK_SIZE, mamba2=False)
        return plan.h_src

    clean, faulty = _both("wrong-chunk-state", run)
    assert torch.allclose(h[clean[1]].float(), truth, atol=1e-5), "the clean plan picks the true state"
    assert faulty[0] == clean[0], "the first request is unaffected"
    assert not torch.allclose(h[faulty[1]].float(), truth, atol=1e-3)


def test_wrong_chunk_state_reaches_the_backend_binding() -> None:
    """The backend imported the plan builder by name; the patch must reach that copy too."""
    from sglang.srt.layers.attention import hybrid_linear_attn_backend as backend

    with applied(FAULTS["wrong-chunk-state"]):
        plan = backend.build_prefill_track_plan([True, True], [100, 100], [100, 100], [0, 0], 64, mamba2=False)
    assert plan.h_src == [1, 2]


def test_unwritten_slot_drops_the_track_copies() -> None:
    from sglang.srt.layers.attention.linear.gdn_backend import GDNAttnBackend

    def run() -> tuple[float, float]:
        ssm = torch.zeros(6, 2, 4, 4)
        h = torch.ones(1, 3, 2, 4, 4)
        meta = SimpleNamespace(
            has_mamba_track_mask=True,
            track_ssm_h_src=torch.tensor([1]),
            track_ssm_h_dst=torch.tensor([4]),
            track_ssm_recompute_dst=None,
            track_ssm_final_src=torch.tensor([1]),
            track_ssm_final_dst=torch.tensor([5]),
        )
        ssm[1] = 2.0
        GDNAttnBackend._track_mamba_state_extend(None, None, h, ssm, meta)
        return float(ssm[4].sum()), float(ssm[5].sum())

    clean, faulty = _both("unwritten-slot", run)
    assert clean == (32.0, 64.0)
    assert faulty == (0.0, 0.0)


# ---------------------------------------------------------------- end to end (the real engine)

CONTENT_FAULTS = {
    "qwen3-next": ("wrong-chunk-state", "unwritten-slot"),
    "nemotron-h": ("wrong-chunk-state", "unwritten-slot", "zero-initial-state"),
    "qwen3.5": ("wrong-chunk-state", "unwritten-slot", "zero-initial-state"),
}


def _demo_digest(model: str, fault: str | None, requests: int = 24) -> str:
    environ = {k: v for k, v in os.environ.items() if k != faults.ENV_VAR}
    command = [MCINSPECT, "demo", "--headless", "--json", "--no-hooks", "--model", model, "--requests", str(requests)]
    done = subprocess.run(
        command + (["--fault", fault] if fault else []),
        env=environ,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["output_digest"]


@pytest.mark.slow
@opt_in(FAULT_MATRIX)  # CI: each content fault's effect on the states, caught by T2 (test_faults_caught)
@pytest.mark.parametrize("model", list(CONTENT_FAULTS))
def test_content_faults_change_the_engine_outputs(model: str) -> None:
    """Faults only content checks can see: the same seed must give different answers. The tiny
    models decay their states slowly (state_memory.py), so a wrong state shows in the outputs;
    28 requests include the few-shot wave where zero-initial-state bites."""
    clean = _demo_digest(model, None, requests=28)
    for name in CONTENT_FAULTS[model]:
        assert _demo_digest(model, name, requests=28) != clean, name
