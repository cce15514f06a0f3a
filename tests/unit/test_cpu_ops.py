"""Torch CPU ops vs. straightforward references written independently here.

Every reference works token by token (or window by window) in float64, holds the recurrent
state in the classic [K, V] orientation and maps value heads to q/k heads by explicit
integer division, so a layout or head-grouping slip in the ops shows up as a mismatch.
The ops are called with the keyword arguments sglang 0.5.23 passes at its call sites.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from mcinspect_kernels.cpu_ops import ACCELERATOR_ONLY_NAMES, SGL_KERNEL_MAMBA_OPS, SGL_KERNEL_TORCH_OPS, TRITON_REPLACEMENTS
from mcinspect_kernels.cpu_ops.causal_conv1d import causal_conv1d_fn_cpu, causal_conv1d_update_cpu
from mcinspect_kernels.cpu_ops.gated_delta_rule import (
    chunk_gated_delta_rule_cpu,
    fused_gdn_gating_cpu,
    fused_sigmoid_gating_delta_rule_update_cpu,
)
from mcinspect_kernels.cpu_ops.moe_gate import fused_gate_sigmoid_mul, fused_gate_sigmoid_mul_add
from mcinspect_kernels.cpu_ops.rmsnorm_gated import fused_rmsnorm_gated_cpu
from mcinspect_kernels.cpu_ops.state_tracking import (
    track_mamba_states_all_layers,
    track_mamba_states_if_needed,
)

# fp32 ops vs float64 references: the chunked solve and fp32 accumulation reorder sums,
# leaving errors around 1e-6 on O(1) values; 1e-4 still catches any semantic slip.
FP32_TOL = dict(atol=1e-4, rtol=1e-4)
# Outputs rounded to bf16 (8-bit mantissa, relative step 2^-8 ~ 4e-3) vs float64 references.
BF16_TOL = dict(atol=2e-2, rtol=2e-2)
# Pure copies and fp32 elementwise formulas: identical up to the last fp32 bit.
EXACT_TOL = dict(atol=1e-6, rtol=1e-6)

CHUNK = 64  # FLA's chunk size, which sglang's extra_buffer tracking assumes
QK_HEADS, V_HEADS, K_DIM, V_DIM = 2, 4, 16, 8  # grouped heads, K != V to expose transposes
SEQ_LENS = [1, 64, 150, 37, 130]  # one token, exactly one chunk, > 64 and not multiples of 64


# ---------------------------------------------------------------- references


def ref_softplus(x: float) -> float:
    return x if x > 20.0 else math.log1p(math.exp(x))


def ref_gates(A_log, a, b, dt_bias):
    """g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), element by element."""
    g = torch.empty(a.shape, dtype=torch.float64)
    beta = torch.empty(a.shape, dtype=torch.float64)
    for t in range(a.shape[0]):
        for h in range(a.shape[1]):
            x = float(a[t, h]) + float(dt_bias[h])
            g[t, h] = -math.exp(float(A_log[h])) * ref_softplus(x)
            beta[t, h] = 1.0 / (1.0 + math.exp(-float(b[t, h])))
    return g, beta


def ref_gated_delta_rule(q, k, v, g, beta, state_vk=None, l2norm=True):
    """Per-token recurrence for one sequence.

    q, k: (T, H, K); v: (T, HV, V); g, beta: (T, HV); state_vk: (HV, V, K) as sglang stores
    it. Returns outputs (T, HV, V) and the states before token 0, after token 0, ...,
    each converted back to (HV, V, K).
    """
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    steps, num_v_heads = v.shape[:2]
    group = num_v_heads // q.shape[1]
    scale = q.shape[-1] ** -0.5
    S = torch.zeros(num_v_heads, q.shape[-1], v.shape[-1], dtype=torch.float64)  # [K, V]
    if state_vk is not None:
        S = state_vk.double().transpose(-1, -2).clone()
    out = torch.zeros(steps, num_v_heads, v.shape[-1], dtype=torch.float64)
    states = [S.transpose(-1, -2).clone()]
    for t in range(steps):
        for h in range(num_v_heads):
            kh, qh = k[t, h // group], q[t, h // group] * scale
            decayed = math.exp(g[t, h]) * S[h]
            S[h] = decayed + beta[t, h] * torch.outer(kh, v[t, h] - decayed.T @ kh)
            out[t, h] = S[h].T @ qh
        states.append(S.transpose(-1, -2).clone())
    return out, states


def ref_conv(window_prior, x, weight, bias, silu):
    """Explicit sliding-window sum: y[:, t] = bias + sum_j w[:, j] * (prior ++ x)[:, t + j]."""
    padded = torch.cat([window_prior.double(), x.double()], dim=1)
    width = weight.shape[1]
    y = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[1]):
        acc = torch.zeros(x.shape[0], dtype=torch.float64) if bias is None else bias.double().clone()
        for j in range(width):
            acc += weight[:, j].double() * padded[:, t + j]
        y[:, t] = acc * torch.sigmoid(acc) if silu else acc
    return y, padded[:, -(width - 1) :]


# ---------------------------------------------------------------- helpers


def make_qkvgb(total, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, total, QK_HEADS, K_DIM, generator=gen).to(dtype)
    k = torch.randn(1, total, QK_HEADS, K_DIM, generator=gen).to(dtype)
    v = torch.randn(1, total, V_HEADS, V_DIM, generator=gen).to(dtype)
    # Decays in [exp(-1), 1): long chunks still carry signal through the whole sequence.
    g = -torch.rand(1, total, V_HEADS, generator=gen)
    beta = torch.rand(1, total, V_HEADS, generator=gen).to(dtype)
    return q, k, v, g, beta


def cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def state_pool(slots, seed, zero_slots=()):
    pool = torch.randn(slots, V_HEADS, V_DIM, K_DIM, generator=torch.Generator().manual_seed(seed))
    for s in zero_slots:
        pool[s] = 0  # a fresh slot, as sglang zeroes it before the first extend
    return pool


# ---------------------------------------------------------------- chunked prefill


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, FP32_TOL), (torch.bfloat16, BF16_TOL)])
def test_chunk_gated_delta_rule_varlen_batch(dtype, tol):
    total = sum(SEQ_LENS)
    q, k, v, g, beta = make_qkvgb(total, dtype, seed=0)
    pool = state_pool(8, seed=1, zero_slots=[5])
    pool_before = pool.clone()
    slots = [3, 5, -1, 0, 6]  # -1: padded row, starts from zeros and is not written back
    bounds = cu(SEQ_LENS)

    o, final, h = chunk_gated_delta_rule_cpu(
        q=q,
        k=k,
        v=v,
        g=g,
        beta=beta,
        initial_state=pool,
        cu_seqlens=bounds,
        head_first=False,
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.tensor(slots, dtype=torch.int32),
    )

    assert o.shape == v.shape and o.dtype == dtype
    num_chunks = [math.ceil(n / CHUNK) for n in SEQ_LENS]
    assert h.shape == (1, sum(num_chunks), V_HEADS, V_DIM, K_DIM) and h.dtype == dtype
    assert final.shape == (len(SEQ_LENS), V_HEADS, V_DIM, K_DIM)

    chunk_row = 0
    for i, (start, end, slot) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), slots)):
        init = pool_before[slot] if slot >= 0 else None
        ref_o, ref_states = ref_gated_delta_rule(
            q[0, start:end], k[0, start:end], v[0, start:end], g[0, start:end], beta[0, start:end], init
        )
        torch.testing.assert_close(o[0, start:end].double(), ref_o, **tol)
        torch.testing.assert_close(final[i].double(), ref_states[-1], **tol)
        # Chunk grid is per sequence: row chunk_row + c holds the state after c * 64 tokens.
        for c in range(num_chunks[i]):
            torch.testing.assert_close(h[0, chunk_row + c].double(), ref_states[c * CHUNK], **tol)
        chunk_row += num_chunks[i]
        if slot >= 0:
            torch.testing.assert_close(pool[slot].double(), ref_states[-1], **tol)
    untouched = [s for s in range(8) if s not in slots]
    assert torch.equal(pool[untouched], pool_before[untouched])


def test_chunk_gated_delta_rule_without_writeback_or_pool():
    q, k, v, g, beta = make_qkvgb(70, torch.float32, seed=2)
    pool = state_pool(3, seed=3)
    pool_before = pool.clone()
    o, final, _ = chunk_gated_delta_rule_cpu(
        q,
        k,
        v,
        g,
        beta,
        initial_state=pool,
        cu_seqlens=cu([70]),
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.tensor([2]),
        inplace_update=False,
    )
    assert torch.equal(pool, pool_before)
    ref_o, ref_states = ref_gated_delta_rule(q[0], k[0], v[0], g[0], beta[0], pool_before[2])
    torch.testing.assert_close(o[0].double(), ref_o, **FP32_TOL)
    torch.testing.assert_close(final[0].double(), ref_states[-1], **FP32_TOL)

    # No pool at all, no cu_seqlens: each batch row is a sequence starting from zeros, and
    # h is laid out (B, ceil(T / 64), ...). No l2norm here, so that path is covered too.
    q2, k2, v2, g2, b2 = (t.view(2, 35, *t.shape[2:]) for t in (q, k, v, g, beta))
    o2, _, h2 = chunk_gated_delta_rule_cpu(q2, k2, v2, g2, b2)
    assert h2.shape == (2, 1, V_HEADS, V_DIM, K_DIM)
    for row in range(2):
        ref_o2, ref_states2 = ref_gated_delta_rule(q2[row], k2[row], v2[row], g2[row], b2[row], l2norm=False)
        torch.testing.assert_close(o2[row].double(), ref_o2, **FP32_TOL)
        assert torch.count_nonzero(h2[row, 0]) == 0 and torch.count_nonzero(ref_states2[0]) == 0


def _load_sglang_track_plan():
    """sglang's own host-side planner of which `h` row extra_buffer copies, loaded from its
    file alone (importing the sglang package would pull in the whole runtime)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed")
    path = Path(spec.submodule_search_locations[0]) / "srt/layers/attention/mamba/prefill_track_metadata.py"
    module_spec = importlib.util.spec_from_file_location("_sglang_prefill_track_metadata", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.build_prefill_track_plan


def test_chunk_states_at_the_rows_sglang_tracking_reads():
    build_prefill_track_plan = _load_sglang_track_plan()
    extend_lens = [150, 37, 130, 64, 200]
    prefix_lens = [0, 0, 32, 0, 0]
    lens_to_track = [150, 37, 100, 64, 199]  # tracked length within this extend
    plan = build_prefill_track_plan(
        [True] * len(extend_lens),
        [p + n for p, n in zip(prefix_lens, lens_to_track)],
        extend_lens,
        prefix_lens,
        CHUNK,
        mamba2=False,  # GDN: the per-sequence chunk grid
    )
    assert plan.h_rows == [0, 1, 2, 4]  # row 3 is chunk-aligned: it takes the final state

    q, k, v, g, beta = make_qkvgb(sum(extend_lens), torch.float32, seed=4)
    pool = state_pool(len(extend_lens), seed=5)
    pool_before = pool.clone()
    bounds = cu(extend_lens).tolist()
    _, _, h = chunk_gated_delta_rule_cpu(
        q=q,
        k=k,
        v=v,
        g=g,
        beta=beta,
        initial_state=pool,
        cu_seqlens=cu(extend_lens),
        head_first=False,
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.arange(len(extend_lens)),
    )
    tracked = h.squeeze(0)[torch.tensor(plan.h_src)]  # what _track_mamba_state_extend copies
    for got, row in zip(tracked, plan.h_rows):
        start, end = bounds[row], bounds[row + 1]
        _, ref_states = ref_gated_delta_rule(
            q[0, start:end], k[0, start:end], v[0, start:end], g[0, start:end], beta[0, start:end], pool_before[row]
        )
        aligned = lens_to_track[row] // CHUNK * CHUNK
        torch.testing.assert_close(got.double(), ref_states[aligned], **FP32_TOL)


# ---------------------------------------------------------------- recurrent decode / verify


def test_fused_decode_update_is_one_recurrence_step():
    gen = torch.Generator().manual_seed(6)
    slots = [2, -1, 4, 7, 0]
    batch = len(slots)
    q, k, v, _, _ = make_qkvgb(batch, torch.bfloat16, seed=7)
    a = torch.randn(batch, V_HEADS, generator=gen).to(torch.bfloat16)
    b = torch.randn(batch, V_HEADS, generator=gen).to(torch.bfloat16)
    A_log = torch.randn(V_HEADS, generator=gen)
    dt_bias = torch.randn(V_HEADS, generator=gen).to(torch.bfloat16)
    pool = state_pool(8, seed=8)
    pool_before = pool.clone()

    o = fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log,
        dt_bias=dt_bias,
        q=q,
        k=k,
        v=v,
        a=a,
        b=b,
        initial_state_source=pool,
        initial_state_indices=torch.tensor(slots, dtype=torch.int32),
        cu_seqlens=torch.arange(batch + 1, dtype=torch.int32),
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
    )

    assert o.shape == v.shape and o.dtype == torch.bfloat16
    g, beta = ref_gates(A_log, a, b, dt_bias)
    for i, slot in enumerate(slots):
        init = pool_before[slot] if slot >= 0 else None
        ref_o, ref_states = ref_gated_delta_rule(q[0, i : i + 1], k[0, i : i + 1], v[0, i : i + 1], g[i : i + 1], beta[i : i + 1], init)
        torch.testing.assert_close(o[0, i].double(), ref_o[0], **BF16_TOL)
        if slot >= 0:
            # fp32 pool, fp32 math: only the bf16 inputs differ from the reference's view.
            torch.testing.assert_close(pool[slot].double(), ref_states[1], **FP32_TOL)
    untouched = [s for s in range(8) if s not in slots]
    assert torch.equal(pool[untouched], pool_before[untouched])


def test_fused_update_target_verify_caches_each_step():
    gen = torch.Generator().manual_seed(9)
    batch, draft = 3, 4
    q, k, v, _, _ = make_qkvgb(batch * draft, torch.float32, seed=10)
    a = torch.randn(batch * draft, V_HEADS, generator=gen)
    b = torch.randn(batch * draft, V_HEADS, generator=gen)
    A_log = torch.randn(V_HEADS, generator=gen)
    dt_bias = torch.randn(V_HEADS, generator=gen)
    pool = state_pool(5, seed=11)
    pool_before = pool.clone()
    buffer = torch.full((4, draft + 1, V_HEADS, V_DIM, K_DIM), 7.0)  # pitch > draft, like adaptive spec
    slots, steps = [1, 3, 4], [2, -1, 0]

    o = fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log,
        dt_bias=dt_bias,
        q=q,
        k=k,
        v=v,
        a=a,
        b=b,
        initial_state_source=pool,
        initial_state_indices=torch.tensor(slots),
        cu_seqlens=torch.arange(0, batch * draft + 1, draft, dtype=torch.int32),
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
        is_kda=False,
        disable_state_update=True,
        intermediate_states_buffer=buffer,
        intermediate_state_indices=torch.tensor(steps, dtype=torch.int32),
        cache_steps=draft,
        retrieve_parent_token=None,
    )

    assert torch.equal(pool, pool_before)
    g, beta = ref_gates(A_log, a, b, dt_bias)
    for i, (slot, step_row) in enumerate(zip(slots, steps)):
        span = slice(i * draft, (i + 1) * draft)
        ref_o, ref_states = ref_gated_delta_rule(q[0, span], k[0, span], v[0, span], g[span], beta[span], pool_before[slot])
        torch.testing.assert_close(o[0, span].double(), ref_o, **FP32_TOL)
        if step_row >= 0:
            for t in range(draft):
                torch.testing.assert_close(buffer[step_row, t].double(), ref_states[t + 1], **FP32_TOL)
            assert torch.all(buffer[step_row, draft] == 7.0)
    assert torch.all(buffer[[1, 3]] == 7.0)


def test_decode_continues_chunked_prefill_state():
    """Prefill L tokens with the chunk op, decode token L+1 with the fused op: same output as
    prefilling L+1 tokens, so both ops agree on the pool layout."""
    gen = torch.Generator().manual_seed(12)
    total = 131
    q, k, v, _, _ = make_qkvgb(total, torch.float32, seed=13)
    a = torch.randn(total, V_HEADS, generator=gen)
    b = torch.randn(total, V_HEADS, generator=gen)
    A_log, dt_bias = torch.randn(V_HEADS, generator=gen), torch.randn(V_HEADS, generator=gen)
    g, beta = fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    pool = torch.zeros(2, V_HEADS, V_DIM, K_DIM)
    whole = pool.clone()
    one = torch.tensor([1])

    chunk_gated_delta_rule_cpu(
        q=q[:, :-1],
        k=k[:, :-1],
        v=v[:, :-1],
        g=g[:, :-1],
        beta=beta[:, :-1],
        initial_state=pool,
        cu_seqlens=cu([total - 1]),
        head_first=False,
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=one,
    )
    o_step = fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log,
        dt_bias=dt_bias,
        q=q[:, -1:],
        k=k[:, -1:],
        v=v[:, -1:],
        a=a[-1:],
        b=b[-1:],
        initial_state_source=pool,
        initial_state_indices=one,
        cu_seqlens=cu([1]),
        use_qk_l2norm_in_kernel=True,
        softplus_beta=1.0,
        softplus_threshold=20.0,
    )
    o_all, _, _ = chunk_gated_delta_rule_cpu(
        q=q,
        k=k,
        v=v,
        g=g,
        beta=beta,
        initial_state=whole,
        cu_seqlens=cu([total]),
        head_first=False,
        use_qk_l2norm_in_kernel=True,
        initial_state_indices=one,
    )
    torch.testing.assert_close(o_step[0, 0], o_all[0, -1], **FP32_TOL)
    torch.testing.assert_close(pool, whole, **FP32_TOL)


# ---------------------------------------------------------------- gating


def test_fused_gdn_gating_formula():
    gen = torch.Generator().manual_seed(14)
    tokens = 9
    A_log = torch.randn(V_HEADS, generator=gen)
    a = (torch.randn(tokens, V_HEADS, generator=gen) * 4).to(torch.bfloat16)
    a[0] = 25.0  # softplus is linear above its threshold of 20
    a[1] = -30.0  # and ~exp(x) far below zero
    b = torch.randn(tokens, V_HEADS, generator=gen).to(torch.bfloat16)
    dt_bias = torch.randn(V_HEADS, generator=gen).to(torch.bfloat16)

    g, beta = fused_gdn_gating_cpu(A_log, a, b, dt_bias)

    ref_g, ref_beta = ref_gates(A_log, a, b, dt_bias)
    assert g.shape == beta.shape == (1, tokens, V_HEADS)
    assert g.dtype == torch.float32 and beta.dtype == torch.bfloat16
    torch.testing.assert_close(g[0].double(), ref_g, **EXACT_TOL)
    # beta is rounded to b's dtype (bf16), like sglang's CPU op.
    torch.testing.assert_close(beta[0].double(), ref_beta, atol=4e-3, rtol=0)


# ---------------------------------------------------------------- causal conv1d


CONV_DIM, WIDTH = 6, 4


def conv_params(seed, with_bias=True):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(CONV_DIM, WIDTH, generator=gen)
    bias = torch.randn(CONV_DIM, generator=gen) if with_bias else None
    pool = torch.randn(7, CONV_DIM, WIDTH - 1, generator=gen)
    return gen, weight, bias, pool


@pytest.mark.parametrize(("activation", "with_bias"), [("silu", True), (None, False)])
def test_causal_conv1d_fn_varlen(activation, with_bias):
    gen, weight, bias, pool = conv_params(15, with_bias)
    pool_before = pool.clone()
    lengths = [5, 1, 2, 9, 3, 4]  # some shorter than the window of width - 1 = 3
    slots = [3, 0, -1, 5, 1, 2]  # -1: padded row
    has_init = [True, True, False, False, True, False]
    bounds = cu(lengths).tolist()
    # channel-last (dim, tokens) view, as sglang passes mixed_qkv.transpose(0, 1)
    x = torch.randn(sum(lengths), CONV_DIM, generator=gen).transpose(0, 1)

    out = causal_conv1d_fn_cpu(
        x,
        weight,
        bias,
        activation=activation,
        conv_states=pool,
        has_initial_state=torch.tensor(has_init),
        cache_indices=torch.tensor(slots, dtype=torch.int32),
        query_start_loc=cu(lengths),
        seq_lens_cpu=lengths,
    )

    assert out.shape == x.shape
    for start, end, slot, init in zip(bounds[:-1], bounds[1:], slots, has_init):
        if slot == -1:
            assert torch.count_nonzero(out[:, start:end]) == 0
            continue
        prior = pool_before[slot] if init else torch.zeros(CONV_DIM, WIDTH - 1)
        ref_y, ref_state = ref_conv(prior, x[:, start:end], weight, bias, activation == "silu")
        torch.testing.assert_close(out[:, start:end].double(), ref_y, **FP32_TOL)
        torch.testing.assert_close(pool[slot].double(), ref_state, **EXACT_TOL)
    assert torch.equal(pool[[4, 6]], pool_before[[4, 6]])


def test_causal_conv1d_update_decode_and_verify():
    gen, weight, bias, pool = conv_params(16)
    pool_before = pool.clone()
    slots = [2, -1, 0, 5]

    x = torch.randn(len(slots), CONV_DIM, generator=gen)
    out = causal_conv1d_update_cpu(x, pool, weight, bias, "silu", conv_state_indices=torch.tensor(slots, dtype=torch.int32))
    assert out.shape == x.shape
    for i, slot in enumerate(slots):
        if slot == -1:
            assert torch.count_nonzero(out[i]) == 0
            continue
        ref_y, ref_state = ref_conv(pool_before[slot], x[i, :, None], weight, bias, True)
        torch.testing.assert_close(out[i].double(), ref_y[:, 0], **FP32_TOL)
        torch.testing.assert_close(pool[slot].double(), ref_state, **EXACT_TOL)
    assert torch.equal(pool[[1, 3, 4, 6]], pool_before[[1, 3, 4, 6]])

    # Verify: 3 draft tokens per row; the window after each token goes to the scratch buffer.
    pool_before = pool.clone()
    draft = 3
    xs = torch.randn(len(slots), CONV_DIM, draft, generator=gen)
    windows = torch.full((4, draft, CONV_DIM, WIDTH - 1), 9.0)
    step_rows = [1, 3, 0, 2]
    out = causal_conv1d_update_cpu(
        xs,
        pool,
        weight,
        bias,
        "silu",
        conv_state_indices=torch.tensor(slots, dtype=torch.int32),
        intermediate_conv_window=windows,
        intermediate_state_indices=torch.tensor(step_rows, dtype=torch.int32),
        retrieve_next_token=None,
        retrieve_next_sibling=None,
        retrieve_parent_token=None,
    )
    for i, (slot, step_row) in enumerate(zip(slots, step_rows)):
        if slot == -1:
            assert torch.all(windows[step_row] == 9.0)
            continue
        ref_y, ref_state = ref_conv(pool_before[slot], xs[i], weight, bias, True)
        torch.testing.assert_close(out[i].double(), ref_y, **FP32_TOL)
        torch.testing.assert_close(pool[slot].double(), ref_state, **EXACT_TOL)
        for t in range(draft):
            _, ref_window = ref_conv(pool_before[slot], xs[i, :, : t + 1], weight, bias, True)
            torch.testing.assert_close(windows[step_row, t].double(), ref_window, **EXACT_TOL)


def test_conv_update_continues_prefill():
    gen, weight, bias, pool = conv_params(17)
    x = torch.randn(CONV_DIM, 8, generator=gen)
    slot = torch.tensor([4], dtype=torch.int32)
    whole = causal_conv1d_fn_cpu(
        x,
        weight,
        bias,
        activation="silu",
        conv_states=pool.clone(),
        has_initial_state=torch.tensor([False]),
        cache_indices=slot,
        query_start_loc=cu([8]),
        seq_lens_cpu=[8],
    )
    causal_conv1d_fn_cpu(
        x[:, :7],
        weight,
        bias,
        activation="silu",
        conv_states=pool,
        has_initial_state=torch.tensor([False]),
        cache_indices=slot,
        query_start_loc=cu([7]),
        seq_lens_cpu=[7],
    )
    step = causal_conv1d_update_cpu(x[None, :, 7], pool, weight, bias, "silu", conv_state_indices=slot)
    torch.testing.assert_close(step[0], whole[:, 7], **EXACT_TOL)


# ---------------------------------------------------------------- gated rmsnorm


@pytest.mark.parametrize(("dtype", "with_weight", "tol"), [(torch.bfloat16, True, BF16_TOL), (torch.float32, False, FP32_TOL)])
def test_fused_rmsnorm_gated(dtype, with_weight, tol):
    gen = torch.Generator().manual_seed(18)
    x = torch.randn(7, V_DIM, generator=gen).to(dtype)
    z = torch.randn(7, V_DIM, generator=gen).to(dtype)
    weight = torch.randn(V_DIM, generator=gen).to(dtype) if with_weight else None
    eps = 1e-6

    out = fused_rmsnorm_gated_cpu(x, weight, z, eps)

    assert out.dtype == dtype
    for r in range(x.shape[0]):
        row = x[r].double()
        normed = row / math.sqrt(float((row * row).mean()) + eps)
        if weight is not None:
            normed = normed * weight.double()
        gate = z[r].double()
        torch.testing.assert_close(out[r].double(), normed * gate / (1 + torch.exp(-gate)), **tol)


# ---------------------------------------------------------------- state tracking


def test_track_mamba_states():
    gen = torch.Generator().manual_seed(19)
    conv = torch.randn(3, 8, 4, 3, generator=gen)  # [layers, slots, dim, width - 1]
    ssm = torch.randn(3, 8, 2, 3, 5, generator=gen)
    cache_indices = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32)
    mask = torch.tensor([True, False, True, True, True])  # row 4 lies beyond batch_size
    track = torch.tensor([6, 7, 0, 5, 2], dtype=torch.int32)
    batch_size = 4

    def expected(pool, sources):
        want = pool.clone()
        for row in range(batch_size):
            if mask[row] and sources[row] >= 0:
                want[:, int(track[row])] = pool[:, int(sources[row])]
        return want

    conv_all, ssm_all = conv.clone(), ssm.clone()
    track_mamba_states_all_layers(conv_all, ssm_all, cache_indices, mask, track, batch_size)
    assert torch.equal(conv_all, expected(conv, cache_indices))
    assert torch.equal(ssm_all, expected(ssm, cache_indices))

    conv_one, ssm_one = conv[1].clone(), ssm[1].clone()
    track_mamba_states_if_needed(conv_one, ssm_one, cache_indices, mask, track, batch_size)
    assert torch.equal(conv_one, conv_all[1]) and torch.equal(ssm_one, ssm_all[1])

    # A freed slot (-1) is skipped when the unified pool asks for it, an error otherwise.
    freed = torch.tensor([1, 2, -1, 4], dtype=torch.int32)
    conv_one, ssm_one = conv[0].clone(), ssm[0].clone()
    track_mamba_states_if_needed(conv_one, ssm_one, freed, mask, track, batch_size, check_freed_slots=True)
    assert torch.equal(conv_one, expected(conv, freed)[0]) and torch.equal(ssm_one, expected(ssm, freed)[0])
    with pytest.raises(ValueError):
        track_mamba_states_if_needed(conv[0].clone(), ssm[0].clone(), freed, mask, track, batch_size)


# ---------------------------------------------------------------- MoE shared-expert gate


def test_fused_gate_sigmoid_mul_and_add():
    gen = torch.Generator().manual_seed(20)
    hidden = torch.randn(5, 12, generator=gen).to(torch.bfloat16)
    weight = torch.randn(12, generator=gen).to(torch.bfloat16)
    shared = torch.randn(5, 12, generator=gen).to(torch.bfloat16)
    final = torch.randn(5, 12, generator=gen).to(torch.bfloat16)
    final_before = final.clone()

    gated = fused_gate_sigmoid_mul(hidden, weight, shared)
    assert fused_gate_sigmoid_mul_add(hidden, weight, shared, final) is None

    for r in range(5):
        logit = sum(float(hidden[r, j]) * float(weight[j]) for j in range(12))
        gate = 1.0 / (1.0 + math.exp(-logit))
        want = gate * shared[r].double()
        torch.testing.assert_close(gated[r].double(), want, **BF16_TOL)
        torch.testing.assert_close(final[r].double(), final_before[r].double() + want, **BF16_TOL)


# ---------------------------------------------------------------- registry


def test_registries_name_what_sglang_looks_up():
    assert set(SGL_KERNEL_MAMBA_OPS) == {"causal_conv1d_fn_cpu", "causal_conv1d_update_cpu", "chunk_gated_delta_rule_cpu"}
    qwen3_5_ops = {
        "fused_sigmoid_mul_cpu",
        "fused_qk_gemma_rmsnorm_cpu",
        "fused_qk_gemma_rmsnorm_with_gate_cpu",
        "fused_qkvzba_split_reshape_cat_contiguous_cpu",
    }
    assert (
        set(SGL_KERNEL_TORCH_OPS)
        == {"fused_gdn_gating_cpu", "fused_sigmoid_gating_delta_rule_update_cpu", "fused_rmsnorm_gated_cpu"} | qwen3_5_ops
    )
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed")
    root = Path(spec.submodule_search_locations[0])

    def source(module: str) -> str:
        return (root / Path(*module.split(".")[1:])).with_suffix(".py").read_text()

    for module, attrs in TRITON_REPLACEMENTS.items():
        for name in attrs:
            # imported by name, so the caller resolves it as this module's global at call time
            assert f"    {name},\n" in source(module) and f"{name}(" in source(module), (module, name)
    for module, attrs in ACCELERATOR_ONLY_NAMES.items():
        for name in attrs:
            # bound only under is_cuda() / is_npu() / is_xpu(), called (or chosen) unconditionally
            assert f"as {name},\n" in source(module) and f"{name}\n" in source(module), (module, name)
    qwen3_5 = source("sglang.srt.models.qwen3_5")
    assert {name for name in SGL_KERNEL_TORCH_OPS if f"torch.ops.sgl_kernel.{name}\n" in qwen3_5} == qwen3_5_ops
