"""The recompute oracle on NemotronH and Qwen3.5: its state layout against sglang's CPU ops, per family.

As for Qwen3-Next (test_oracle.py): for the first mamba layer both sides see the same input,
so the oracle's state must equal what the CPU ops sglang runs leave in a pool slot, called as
sglang's route calls them (NemotronH: `layers/attention/mamba/mamba.py`; Qwen3.5: the GDN
backend after `fused_qkvzba_split_reshape_cat_contiguous`): the conv window bit for bit, the
temporal state up to the rounding of two implementations. A layout slip (a transposed state,
permuted conv channels) would be far off.
"""

from __future__ import annotations

import pytest
import torch

from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle
from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model
from mcinspect_engine_hooks.families import get_family
from mcinspect_kernels.cpu_ops import (
    causal_conv1d_fn_cpu,
    chunk_gated_delta_rule_cpu,
    fused_gdn_gating_cpu,
    mamba_chunk_scan_combined_cpu,
)

LAYOUT_TOL = 0.02
"""Relative L2 between oracle and CPU ops for layer 0: transformers convolves in bf16, the ops in fp32."""


@pytest.fixture(scope="module", params=["nemotron-h", "qwen3.5"])
def oracle(request: pytest.FixtureRequest) -> RecomputeOracle:
    return RecomputeOracle(ensure_tiny_model(request.param))


def tokens(n: int, seed: int = 0) -> list[int]:
    return [(37 * i + 11 * seed) % 500 + 3 for i in range(n)]


def layer0_input(oracle: RecomputeOracle, prefix: list[int]) -> tuple[torch.nn.Module, torch.Tensor]:
    """The first mamba layer's mixer and the input transformers feeds it."""
    layer = oracle.model.layers[oracle.linear_layers[0]]
    mixer = layer.mixer if oracle.family.name == "nemotron-h" else layer.linear_attn
    seen: dict[str, torch.Tensor] = {}

    def keep_input(module: object, args: tuple, kwargs: dict) -> None:
        seen["x"] = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]

    hook = mixer.register_forward_pre_hook(keep_input, with_kwargs=True)
    try:
        oracle.model(input_ids=torch.tensor([prefix]), use_cache=True)
    finally:
        hook.remove()
    return mixer, seen["x"][0]


@torch.no_grad()
def mamba2_ops_state(oracle: RecomputeOracle, prefix: list[int], slot: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's (conv [conv_dim, K-1], temporal [H, P, N]) as mamba.py's prefill leaves them."""
    mixer, x = layer0_input(oracle, prefix)
    n = len(prefix)
    gate, xbc, dt = mixer.in_proj(x).split([mixer.intermediate_size, mixer.conv_dim, mixer.num_heads], -1)
    conv_pool = torch.zeros(slot + 1, mixer.conv_dim, mixer.conv_kernel_size - 1, dtype=torch.bfloat16)
    ssm_pool = torch.zeros(slot + 1, mixer.num_heads, mixer.head_dim, mixer.ssm_state_size)
    starts, slots = torch.tensor([0, n]), torch.tensor([slot])
    conv_out = causal_conv1d_fn_cpu(
        xbc.t(), mixer.conv1d.weight.squeeze(1), mixer.conv1d.bias, activation="silu", conv_states=conv_pool,
        has_initial_state=torch.tensor([False]), cache_indices=slots, query_start_loc=starts, seq_lens_cpu=[n],
    ).t()  # fmt: skip
    groups_state = mixer.n_groups * mixer.ssm_state_size
    hs, B, C = conv_out.split([mixer.intermediate_size, groups_state, groups_state], -1)
    out = torch.empty(1, n, mixer.num_heads, mixer.head_dim, dtype=torch.bfloat16)
    _, varlen, _ = mamba_chunk_scan_combined_cpu(
        hs.reshape(1, n, mixer.num_heads, mixer.head_dim), dt.unsqueeze(0), -torch.exp(mixer.A_log.float()),
        B.reshape(1, n, mixer.n_groups, -1), C.reshape(1, n, mixer.n_groups, -1), chunk_size=mixer.chunk_size,
        D=mixer.D, dt_bias=mixer.dt_bias, cu_seqlens=starts, return_varlen_states=True, return_track_states=True,
        dt_softplus=True, out=out, state_dtype=torch.float32,
    )  # fmt: skip
    ssm_pool[slots] = varlen
    return conv_pool[slot], ssm_pool[slot]


@torch.no_grad()
def qwen3_5_ops_state(oracle: RecomputeOracle, prefix: list[int], slot: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's (conv [conv_dim, K-1], temporal [HV, V, K]) as the GDN backend leaves them."""
    gdn, x = layer0_input(oracle, prefix)
    n = len(prefix)
    mixed = gdn.in_proj_qkv(x)  # q | k | v, the order of sglang's merged in_proj_qkvz
    conv_pool = torch.zeros(slot + 1, gdn.conv_dim, gdn.conv_kernel_size - 1, dtype=torch.bfloat16)
    ssm_pool = torch.zeros(slot + 1, gdn.num_v_heads, gdn.head_v_dim, gdn.head_k_dim)
    starts, slots = torch.tensor([0, n]), torch.tensor([slot])
    out = causal_conv1d_fn_cpu(
        mixed.t().contiguous(), gdn.conv1d.weight.squeeze(1), None, activation="silu", conv_states=conv_pool,
        has_initial_state=torch.tensor([False]), cache_indices=slots, query_start_loc=starts,
    ).t()  # fmt: skip
    q, k, v = torch.split(out, [gdn.key_dim, gdn.key_dim, gdn.value_dim], -1)
    g, beta = fused_gdn_gating_cpu(gdn.A_log, gdn.in_proj_a(x), gdn.in_proj_b(x), gdn.dt_bias)
    chunk_gated_delta_rule_cpu(
        q.reshape(1, n, -1, gdn.head_k_dim), k.reshape(1, n, -1, gdn.head_k_dim), v.reshape(1, n, -1, gdn.head_v_dim),
        g, beta, initial_state=ssm_pool, initial_state_indices=slots, cu_seqlens=starts, use_qk_l2norm_in_kernel=True,
    )  # fmt: skip
    return conv_pool[slot], ssm_pool[slot]


@pytest.mark.parametrize("length", [2, 64, 100, 200])
def test_oracle_layer0_equals_sglang_cpu_ops(oracle: RecomputeOracle, length: int) -> None:
    prefix = tokens(length)
    ops_state = mamba2_ops_state if oracle.family.name == "nemotron-h" else qwen3_5_ops_state
    conv, temporal = ops_state(oracle, prefix)
    state = oracle.state(prefix)
    assert state.conv.dtype == torch.bfloat16 and state.temporal.dtype == torch.float32
    assert state.conv.shape[1:] == conv.shape and state.temporal.shape[1:] == temporal.shape
    assert torch.equal(state.conv[0], conv)  # same projection, same window: bit for bit
    rel = ((state.temporal[0] - temporal).norm() / temporal.norm()).item()
    assert rel < LAYOUT_TOL, rel
    if oracle.family.name == "qwen3.5":  # [HV, V, K] with V == K: a transposed mapping is far off
        assert ((state.temporal[0].transpose(-1, -2) - temporal).norm() / temporal.norm()).item() > 5 * LAYOUT_TOL
    print(f"{oracle.family.name} oracle vs CPU ops, layer 0 after {length} tokens: temporal relative L2 {rel:.2e}, conv exact")


def test_oracle_names_the_family(oracle: RecomputeOracle) -> None:
    assert oracle.family is get_family(oracle.family.name)
    assert len(oracle.linear_layers) == 2  # the tiny models' two mamba layers
