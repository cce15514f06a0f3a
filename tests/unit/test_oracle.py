"""T2: the recompute oracle's layout against sglang's CPU ops, and the T2-recompute check.

The oracle (transformers' Qwen3-Next) must return states in sglang's pool layout. For the
first linear layer both sides see the same input, so the oracle's state must equal what the
CPU ops sglang runs (`mcinspect_kernels.cpu_ops`, called as gdn_backend calls them) leave in a
pool slot: the conv window bit for bit, the SSM state up to fp32 rounding.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mcinspect.checks import CHECKS, StepView, check_step
from mcinspect.checks.recompute import RECOMPUTE, tolerances
from mcinspect.schema import CacheState, KvState, NodeId, SlotClaim, SlotContent, SlotId, Step
from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle
from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model
from mcinspect_kernels.cpu_ops import causal_conv1d_fn_cpu, chunk_gated_delta_rule_cpu, fused_gdn_gating_cpu
from mcinspect_kernels.state_distance import state_distance_to

CALIBRATE = Path(__file__).parents[1] / "bench" / "calibrate_t2.py"
CONV, TEMPORAL = tolerances("transformers").values()
"""The check's tolerances for records from before oracles were named (and for this oracle)."""


@pytest.fixture(scope="module")
def oracle() -> RecomputeOracle:
    return RecomputeOracle(ensure_tiny_model())


def tokens(n: int, seed: int = 0) -> list[int]:
    return [(37 * i + 11 * seed) % 500 + 3 for i in range(n)]


@torch.no_grad()
def cpu_ops_state(oracle: RecomputeOracle, prefix: list[int], slot: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's (conv [conv_dim, K-1], temporal [HV, V, K]) as sglang's CPU path leaves them
    in pool slot `slot`, fed the layer input transformers computes."""
    layer = oracle.model.layers[0]
    gdn = layer.linear_attn
    seen: dict[str, torch.Tensor] = {}

    def keep_input(module: object, args: tuple, kwargs: dict) -> None:
        seen["x"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

    hook = gdn.register_forward_pre_hook(keep_input, with_kwargs=True)
    try:
        oracle.model(input_ids=torch.tensor([prefix]), use_cache=True)
    finally:
        hook.remove()
    x = seen["x"]
    q, k, v, _, b, a = gdn.fix_query_key_value_ordering(gdn.in_proj_qkvz(x), gdn.in_proj_ba(x))
    mixed = torch.cat([t.reshape(len(prefix), -1) for t in (q, k, v)], -1)  # [T, conv_dim], q | k | v
    width = gdn.conv_kernel_size
    conv_pool = torch.zeros(slot + 1, gdn.conv_dim, width - 1, dtype=torch.bfloat16)
    ssm_pool = torch.zeros(slot + 1, gdn.num_v_heads, gdn.head_v_dim, gdn.head_k_dim)
    starts = torch.tensor([0, len(prefix)])
    slots = torch.tensor([slot])
    out = causal_conv1d_fn_cpu(
        mixed.t().contiguous(),
        gdn.conv1d.weight.squeeze(1),
        None,
        activation="silu",
        conv_states=conv_pool,
        has_initial_state=torch.tensor([False]),
        cache_indices=slots,
        query_start_loc=starts,
    ).t()
    qc, kc, vc = torch.split(out, [gdn.key_dim, gdn.key_dim, gdn.value_dim], -1)
    g, beta = fused_gdn_gating_cpu(gdn.A_log, a[0], b[0], gdn.dt_bias)
    chunk_gated_delta_rule_cpu(
        qc.reshape(1, len(prefix), -1, gdn.head_k_dim),
        kc.reshape(1, len(prefix), -1, gdn.head_k_dim),
        vc.reshape(1, len(prefix), -1, gdn.head_v_dim),
        g,
        beta,
        initial_state=ssm_pool,
        initial_state_indices=slots,
        cu_seqlens=starts,
        use_qk_l2norm_in_kernel=True,
    )
    return conv_pool[slot], ssm_pool[slot]


@pytest.mark.parametrize("length", [2, 64, 100, 200])
def test_oracle_layer0_equals_sglang_cpu_ops(oracle: RecomputeOracle, length: int) -> None:
    prefix = tokens(length)
    conv, temporal = cpu_ops_state(oracle, prefix)
    state = oracle.state(prefix)
    assert state.conv.shape == (2, 96, 3) and state.conv.dtype == torch.bfloat16
    assert state.temporal.shape == (2, 2, 16, 16) and state.temporal.dtype == torch.float32
    assert torch.equal(state.conv[0], conv)  # same projection, same window: bit for bit
    rel = (state.temporal[0] - temporal).norm() / temporal.norm()
    # transformers convolves and applies SiLU in bf16, sglang's CPU op in fp32 before rounding:
    # conv outputs differ by an ulp here and there, the state by a few 1e-3.
    assert rel < 0.02, rel
    # A transposed [HV, K, V] mapping would be far off: the check above pins the order.
    assert (state.temporal[0].transpose(-1, -2) - temporal).norm() / temporal.norm() > 0.1


def test_oracle_states_are_distinct_per_position_and_cached(oracle: RecomputeOracle) -> None:
    prefix = tokens(130, seed=1)
    assert oracle.state(prefix) is oracle.state(list(prefix))
    short = oracle.state(prefix[:2])
    assert torch.all(short.conv[:, :, 0] == 0)  # fewer tokens than the window: zero-padded left
    earlier = oracle.state(prefix[:128])
    ref_conv, ref_temporal = oracle.references([prefix])
    pool_conv = torch.stack([torch.zeros_like(earlier.conv), earlier.conv], 1)
    pool_temporal = torch.stack([torch.zeros_like(earlier.temporal), earlier.temporal], 1)
    gap = state_distance_to([], pool_temporal, torch.tensor([1]), [], ref_temporal).rel_l2.item()
    # the state two tokens earlier is a different state (the tiny model decays slowly: two
    # tokens move it by about 0.1, still several tolerances)
    assert gap > 3 * TEMPORAL
    assert state_distance_to([], pool_conv, torch.tensor([1]), [], ref_conv[0]).rel_l2.item() > CONV


# --- the check ----------------------------------------------------------------------------


def state(step: int, contents: dict[SlotId, SlotContent]) -> CacheState:
    """Node 5 owns slot 3; slot 4 is free."""
    slots = {SlotId(3): [SlotClaim(SlotId(3), "tree", node=NodeId(5), seqlen=64)], SlotId(4): [SlotClaim(SlotId(4), "free")]}
    return CacheState(step=Step(step), nodes={}, slots=slots, requests={}, kv=KvState(1, 0, []), contents=contents)


def content(conv: float, temporal: float, step: int = 1) -> SlotContent:
    return SlotContent(SlotId(3), 0xAB, 0, False, Step(step), recompute_conv_rel_l2=conv, recompute_temporal_rel_l2=temporal)


def test_check_is_registered() -> None:
    assert CHECKS[RECOMPUTE].invariant == "T2" and "#37836" in CHECKS[RECOMPUTE].targets


@pytest.mark.parametrize(
    ("conv", "temporal", "flagged"),
    [
        (-1.0, -1.0, None),  # not verified
        (0.002, 0.003, None),  # rounding
        (CONV, TEMPORAL, None),  # at the tolerances
        (2 * TEMPORAL, 0.003, None),  # a conv window is allowed more (bf16 inputs of two implementations)
        (0.002, 3 * TEMPORAL, "temporal"),  # #37836: another position's SSM state
        (2 * CONV, 0.003, "conv"),
        (2 * CONV, 1.5 * TEMPORAL, "conv"),  # the one farthest beyond its tolerance
        (0.002, math.nan, "temporal"),
    ],
)
def test_check_flags_distances_above_tolerance(conv: float, temporal: float, flagged: str | None) -> None:
    found = check_step(StepView.first(state(1, {SlotId(3): content(conv, temporal)})), [RECOMPUTE])
    if flagged is None:
        assert found == []
    else:
        (v,) = found
        assert (v.check, v.slots, v.nodes, v.step) == (RECOMPUTE, (SlotId(3),), (NodeId(5),), Step(1))
        assert flagged in v.reason


def test_check_reports_a_record_once() -> None:
    bad = content(0.002, 1.0)
    first = StepView.first(state(1, {SlotId(3): content(-1.0, -1.0)}))
    verified = first.next(state(2, {SlotId(3): bad}))  # the verification arrives a step later
    again = verified.next(state(3, {SlotId(3): bad}))
    assert check_step(first, [RECOMPUTE]) == []
    assert len(check_step(verified, [RECOMPUTE])) == 1
    assert check_step(again, [RECOMPUTE]) == []


# --- on the real engine -------------------------------------------------------------------


@pytest.mark.slow
def test_clean_engine_states_match_the_recompute() -> None:
    """A short clean demo with --verify: every verified slot is within the tolerance."""
    done = subprocess.run(
        [sys.executable, str(CALIBRATE), "--requests", "12", "--oracle", "transformers", "--one", "qwen3-next,extra_buffer,16,"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    run = json.loads(done.stdout.strip().splitlines()[-1])
    assert run["distances"], "nothing was verified"
    assert max(conv for _, conv, _ in run["distances"]) <= CONV
    assert max(temporal for _, _, temporal in run["distances"]) <= TEMPORAL
    assert run["violations"] == {}
