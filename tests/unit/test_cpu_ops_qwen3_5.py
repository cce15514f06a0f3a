"""The four `torch.ops.sgl_kernel` CPU ops Qwen3.5's model file binds at import, vs float64
references written here and vs the transformers Qwen3.5 modules they stand in for.

The references work row by row and head by head with plain Python indexing; the
transformers side is the real `Qwen3_5RMSNorm` / attention gate / projections on the same
weights. Each test prints its largest error.
"""

from __future__ import annotations

import math

import pytest
import torch

from mcinspect_kernels.cpu_ops.gdn_projection import fused_qkvzba_split_reshape_cat_contiguous_cpu
from mcinspect_kernels.cpu_ops.output_gate import fused_sigmoid_mul_cpu
from mcinspect_kernels.cpu_ops.qk_norm import fused_qk_gemma_rmsnorm_cpu, fused_qk_gemma_rmsnorm_with_gate_cpu

TOKENS, HEADS, KV_HEADS, HEAD_DIM = 5, 3, 1, 32
EPS = 1e-6
BF16_TOL = dict(atol=2e-2, rtol=2e-2)


def ref_gemma_head(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One head: x / rms(x) * (1 + w), float64."""
    xs = [float(v) for v in x]
    scale = 1.0 / math.sqrt(sum(v * v for v in xs) / len(xs) + EPS)
    return torch.tensor([v * scale * (1.0 + float(w)) for v, w in zip(xs, weight)], dtype=torch.float64)


def bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def test_qk_gemma_rmsnorm_per_head() -> None:
    q, k = bf16(TOKENS, HEADS * HEAD_DIM, seed=0), bf16(TOKENS, KV_HEADS * HEAD_DIM, seed=1)
    qw, kw = bf16(HEAD_DIM, seed=2) * 0.1, bf16(HEAD_DIM, seed=3) * 0.1
    q_out, k_out = fused_qk_gemma_rmsnorm_cpu(q, k, qw, kw, EPS, HEAD_DIM)
    assert q_out.shape == q.shape and k_out.shape == k.shape and q_out.dtype == torch.bfloat16
    worst = 0.0
    for out, x, w, heads in ((q_out, q, qw, HEADS), (k_out, k, kw, KV_HEADS)):
        for t in range(TOKENS):
            for h in range(heads):
                cols = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
                want = ref_gemma_head(x[t, cols], w)
                torch.testing.assert_close(out[t, cols].double(), want, **BF16_TOL)
                worst = max(worst, (out[t, cols].double() - want).abs().max().item())
    print(f"fused_qk_gemma_rmsnorm_cpu vs fp64: max abs error {worst:.2e}")


def test_qk_gemma_rmsnorm_with_gate_splits_interleaved_heads() -> None:
    q_gate, k = bf16(TOKENS, HEADS * 2 * HEAD_DIM, seed=4), bf16(TOKENS, KV_HEADS * HEAD_DIM, seed=5)
    qw, kw = bf16(HEAD_DIM, seed=6) * 0.1, bf16(HEAD_DIM, seed=7) * 0.1
    q_out, k_out, gate = fused_qk_gemma_rmsnorm_with_gate_cpu(q_gate, k, qw, kw, EPS, HEAD_DIM, HEADS)
    assert q_out.shape == gate.shape == (TOKENS * HEADS, HEAD_DIM) and k_out.shape == (TOKENS * KV_HEADS, HEAD_DIM)
    worst = 0.0
    for t in range(TOKENS):
        for h in range(HEADS):
            base = h * 2 * HEAD_DIM  # per head: [q_h | gate_h]
            want = ref_gemma_head(q_gate[t, base : base + HEAD_DIM], qw)
            torch.testing.assert_close(q_out[t * HEADS + h].double(), want, **BF16_TOL)
            assert torch.equal(gate[t * HEADS + h], q_gate[t, base + HEAD_DIM : base + 2 * HEAD_DIM])
            worst = max(worst, (q_out[t * HEADS + h].double() - want).abs().max().item())
        torch.testing.assert_close(k_out[t].double(), ref_gemma_head(k[t], kw), **BF16_TOL)
    print(f"fused_qk_gemma_rmsnorm_with_gate_cpu vs fp64: max abs error {worst:.2e}")


def test_sigmoid_mul_in_place() -> None:
    x, gate = bf16(TOKENS, HEADS * HEAD_DIM, seed=8), bf16(TOKENS, HEADS * HEAD_DIM, seed=9)
    before = x.clone()
    assert fused_sigmoid_mul_cpu(x, gate) is None
    want = torch.tensor(
        [[float(a) / (1.0 + math.exp(-float(g))) for a, g in zip(row_x, row_g)] for row_x, row_g in zip(before, gate)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(x.double(), want, **BF16_TOL)
    print(f"fused_sigmoid_mul_cpu vs fp64: max abs error {(x.double() - want).abs().max().item():.2e}")


def test_qkvzba_split_is_the_contiguous_layout() -> None:
    hk, hv, dk, dv = 2, 4, 8, 6
    qkvz, ba = bf16(TOKENS, 2 * hk * dk + 2 * hv * dv, seed=10), bf16(TOKENS, 2 * hv, seed=11)
    mixed, z, b, a = fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz, ba, hk, hv, dk, dv)
    qkv_dim = 2 * hk * dk + hv * dv
    for t in range(TOKENS):
        assert mixed[t].tolist() == qkvz[t, :qkv_dim].tolist()
        for h in range(hv):
            assert z[t, h].tolist() == qkvz[t, qkv_dim + h * dv : qkv_dim + (h + 1) * dv].tolist()
            assert (b[t, h], a[t, h]) == (ba[t, h], ba[t, hv + h])
    assert all(t.is_contiguous() for t in (mixed, z, b, a))
    with pytest.raises(ValueError):
        fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz[:, 1:], ba, hk, hv, dk, dv)
    print("fused_qkvzba_split_reshape_cat_contiguous_cpu vs reference: exact (a copy)")


# ---------------------------------------------------------------- vs transformers' Qwen3.5


@pytest.fixture(scope="module")
def hf():
    modeling = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    from transformers import Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=64, hidden_size=48, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6, rms_norm_eps=EPS,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        attention = modeling.Qwen3_5Attention(config, layer_idx=1).to(torch.bfloat16)
        gdn = modeling.Qwen3_5GatedDeltaNet(config, layer_idx=0).to(torch.bfloat16)
        for norm in (attention.q_norm, attention.k_norm):
            norm.weight.data.normal_(0, 0.1)
    return attention, gdn


@torch.no_grad()
def test_attention_ops_agree_with_transformers(hf) -> None:
    """sglang's CPU path (qkv_proj -> fused norm with gate -> attention -> sigmoid mul) against
    transformers' q_proj / q_norm / k_norm / gate on the same weights."""
    attention, _ = hf
    hidden = bf16(TOKENS, 48, seed=12)
    q_gate, k = attention.q_proj(hidden), attention.k_proj(hidden)
    q_out, k_out, gate = fused_qk_gemma_rmsnorm_with_gate_cpu(
        q_gate, k, attention.q_norm.weight, attention.k_norm.weight, EPS, HEAD_DIM, HEADS
    )
    hf_q, hf_gate = torch.chunk(q_gate.view(TOKENS, -1, HEAD_DIM * 2), 2, dim=-1)
    hf_q, hf_k = attention.q_norm(hf_q), attention.k_norm(k.view(TOKENS, -1, HEAD_DIM))
    errors = {
        "q": (q_out.float() - hf_q.reshape(-1, HEAD_DIM).float()).abs().max().item(),
        "k": (k_out.float() - hf_k.reshape(-1, HEAD_DIM).float()).abs().max().item(),
    }
    torch.testing.assert_close(q_out, hf_q.reshape(-1, HEAD_DIM), **BF16_TOL)
    torch.testing.assert_close(k_out, hf_k.reshape(-1, HEAD_DIM), **BF16_TOL)
    assert torch.equal(gate, hf_gate.reshape(-1, HEAD_DIM))
    q_alone = q_gate.view(TOKENS, HEADS, 2, HEAD_DIM)[:, :, 0].reshape(TOKENS, -1)  # models without the gate
    plain_q, plain_k = fused_qk_gemma_rmsnorm_cpu(q_alone, k, attention.q_norm.weight, attention.k_norm.weight, EPS, HEAD_DIM)
    torch.testing.assert_close(plain_q.view(-1, HEAD_DIM), hf_q.reshape(-1, HEAD_DIM), **BF16_TOL)
    torch.testing.assert_close(plain_k.view(-1, HEAD_DIM), hf_k.reshape(-1, HEAD_DIM), **BF16_TOL)

    attn_out = bf16(TOKENS, HEADS * HEAD_DIM, seed=13)
    hf_gated = attn_out * torch.sigmoid(hf_gate.reshape(TOKENS, -1))
    ours = attn_out.clone()
    fused_sigmoid_mul_cpu(ours, gate.view(TOKENS, -1))
    errors["gate"] = (ours.float() - hf_gated.float()).abs().max().item()
    torch.testing.assert_close(ours, hf_gated, **BF16_TOL)
    print(f"vs transformers Qwen3.5 attention: max abs error {max(errors.values()):.2e} ({errors})")


@torch.no_grad()
def test_gdn_projection_split_agrees_with_transformers(hf) -> None:
    """sglang merges Qwen3.5's four input projections into [qkv | z] and [b | a]; the split
    must hand back exactly what each of transformers' projections computes."""
    _, gdn = hf
    hidden = bf16(TOKENS, 48, seed=14)
    qkvz = torch.cat([gdn.in_proj_qkv(hidden), gdn.in_proj_z(hidden)], -1)
    ba = torch.cat([gdn.in_proj_b(hidden), gdn.in_proj_a(hidden)], -1)
    mixed, z, b, a = fused_qkvzba_split_reshape_cat_contiguous_cpu(
        qkvz, ba, gdn.num_k_heads, gdn.num_v_heads, gdn.head_k_dim, gdn.head_v_dim
    )
    assert torch.equal(mixed, gdn.in_proj_qkv(hidden))
    assert torch.equal(z, gdn.in_proj_z(hidden).reshape(TOKENS, -1, gdn.head_v_dim))
    assert torch.equal(b, gdn.in_proj_b(hidden)) and torch.equal(a, gdn.in_proj_a(hidden))
    print("fused_qkvzba_split_reshape_cat_contiguous_cpu vs transformers Qwen3.5 projections: exact")
