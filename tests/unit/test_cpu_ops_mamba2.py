"""Mamba2's CPU ops (NemotronH) vs a float64 per-token recurrence written here, and vs
transformers' NemotronH torch path.

The reference holds each head's state as [P, N] (head dim x d_state, with P != N so a
transposed layout shows), maps heads to B/C groups by explicit integer division and walks
every sequence token by token. The ops are called with the keyword arguments sglang 0.5.23's
`layers/attention/mamba/mamba.py` passes. Each test prints its largest error.
"""

from __future__ import annotations

import math

import pytest
import torch

from mcinspect_kernels.cpu_ops.causal_conv1d import causal_conv1d_fn_cpu, causal_conv1d_update_cpu
from mcinspect_kernels.cpu_ops.selective_scan import mamba_chunk_scan_combined_cpu, selective_state_update_cpu

HEADS, GROUPS, HEAD_DIM, D_STATE = 4, 2, 8, 16
CHUNK = 64
SEQ_LENS = [1, 64, 150, 37, 130]  # one token, one chunk, starts off the flat chunk grid
FP32_TOL = dict(atol=1e-4, rtol=1e-4)


def inputs(total: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(1, total, HEADS, HEAD_DIM, generator=gen),
        "dt": torch.randn(1, total, HEADS, generator=gen),
        "A": -torch.rand(HEADS, generator=gen) * 0.5 - 0.05,
        "B": torch.randn(1, total, GROUPS, D_STATE, generator=gen),
        "C": torch.randn(1, total, GROUPS, D_STATE, generator=gen),
        "D": torch.randn(HEADS, generator=gen),
        "dt_bias": torch.randn(HEADS, generator=gen) * 0.5,
    }


def ref_scan(t: dict[str, torch.Tensor], start: int, end: int, init: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """y (end - start, H, P) and the state after each token, float64, token by token."""
    state = init.double().clone()
    ys, after = [], []
    for i in range(start, end):
        y = torch.zeros(HEADS, HEAD_DIM, dtype=torch.float64)
        for h in range(HEADS):
            g = h // (HEADS // GROUPS)
            raw = float(t["dt"][0, i, h]) + float(t["dt_bias"][h])
            dt = raw if raw > 20 else math.log1p(math.exp(raw))
            x = t["x"][0, i, h].double()
            state[h] = math.exp(float(t["A"][h]) * dt) * state[h] + dt * torch.outer(x, t["B"][0, i, g].double())
            y[h] = state[h] @ t["C"][0, i, g].double() + float(t["D"][h]) * x
        ys.append(y)
        after.append(state.clone())
    return torch.stack(ys), after


def scan(t: dict[str, torch.Tensor], bounds: list[int], init: torch.Tensor | None, **kwargs):
    """Call the op as mamba.py does; returns (y, states, varlen, track)."""
    out = torch.empty_like(t["x"])
    states, varlen, track = mamba_chunk_scan_combined_cpu(
        t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size=CHUNK, D=t["D"], z=None, dt_bias=t["dt_bias"],
        seq_idx=None, chunk_indices=None, chunk_offsets=None, cu_seqlens=torch.tensor(bounds), initial_states=init,
        return_varlen_states=True, return_final_states=False, return_track_states=True, dt_softplus=True,
        dt_limit=(0.0, float("inf")), out=out, state_dtype=torch.float32, **kwargs,
    )  # fmt: skip
    return out, states, varlen, track


def test_chunk_scan_matches_the_recurrence_on_a_flattened_batch() -> None:
    bounds = [0]
    for n in SEQ_LENS:
        bounds.append(bounds[-1] + n)
    t = inputs(bounds[-1])
    gen = torch.Generator().manual_seed(1)
    init = torch.randn(len(SEQ_LENS), HEADS, HEAD_DIM, D_STATE, generator=gen)
    init[[0, 2]] = 0  # mamba.py zeroes the rows without an initial state
    # Track two checkpoints off the grid: sequence 2 after 64 of its tokens, sequence 4 after 128.
    track_seq, track_end = torch.tensor([2, 4]), torch.tensor([bounds[2] + 64, bounds[4] + 128])
    y, states, varlen, track = scan(t, bounds, init, track_seq_idx=track_seq, track_end_locs=track_end)

    refs = [ref_scan(t, s, e, init[i]) for i, (s, e) in enumerate(zip(bounds[:-1], bounds[1:]))]
    want_y = torch.cat([r[0] for r in refs])
    errors = {"y": (y[0].double() - want_y).abs().max().item()}
    errors["varlen"] = max((varlen[i].double() - refs[i][1][-1]).abs().max().item() for i in range(len(SEQ_LENS)))
    torch.testing.assert_close(y[0].double(), want_y, **FP32_TOL)
    torch.testing.assert_close(varlen.double(), torch.stack([r[1][-1] for r in refs]), **FP32_TOL)

    # One chunk grid over the whole flattened batch: row c is the state at flat position c * 64
    # of the sequence holding flat token c * 64 - 1 (row 0: the first sequence's initial state).
    assert states.shape == (1, math.ceil(bounds[-1] / CHUNK), HEADS, HEAD_DIM, D_STATE)
    torch.testing.assert_close(states[0, 0], init[0], **FP32_TOL)
    for c in range(1, states.shape[1]):
        seq = max(i for i, s in enumerate(bounds[:-1]) if s <= c * CHUNK - 1)
        want = refs[seq][1][c * CHUNK - 1 - bounds[seq]]
        errors["grid"] = max(errors.get("grid", 0.0), (states[0, c].double() - want).abs().max().item())
        torch.testing.assert_close(states[0, c].double(), want, **FP32_TOL)
    for k, (seq, end) in enumerate(zip(track_seq.tolist(), track_end.tolist())):
        torch.testing.assert_close(track[0, k].double(), refs[seq][1][end - 1 - bounds[seq]], **FP32_TOL)
    # The checkpoint sequence 2 wants (after 64 of its tokens) is on no grid row: it starts at 65.
    assert bounds[2] % CHUNK and (bounds[2] + 64) % CHUNK
    print(f"mamba_chunk_scan_combined_cpu vs fp64 recurrence: max abs error {max(errors.values()):.2e} ({errors})")


def test_selective_state_update_matches_the_recurrence_and_skips_padding() -> None:
    t = inputs(3, seed=2)
    gen = torch.Generator().manual_seed(3)
    pool = torch.randn(6, HEADS, HEAD_DIM, D_STATE, generator=gen)
    before = pool.clone()
    slots = torch.tensor([4, -1, 2])
    out = torch.empty(3, HEADS, HEAD_DIM)
    # mamba.py's decode call: dt, A, D, dt_bias expanded over the head dim
    selective_state_update_cpu(
        pool, t["x"][0], t["dt"][0][:, :, None].expand(-1, -1, HEAD_DIM), t["A"][:, None, None].expand(-1, HEAD_DIM, D_STATE),
        t["B"][0], t["C"][0], t["D"][:, None].expand(-1, HEAD_DIM), z=None, dt_bias=t["dt_bias"][:, None].expand(-1, HEAD_DIM),
        dt_softplus=True, state_batch_indices=slots, out=out,
    )  # fmt: skip
    worst = 0.0
    for row, slot in ((0, 4), (2, 2)):
        one = {k: (v[:, row : row + 1] if v.dim() > 1 and k != "A" else v) for k, v in t.items()}
        y, after = ref_scan(one, 0, 1, before[slot])
        torch.testing.assert_close(out[row].double(), y[0], **FP32_TOL)
        torch.testing.assert_close(pool[slot].double(), after[0], **FP32_TOL)
        worst = max(worst, (out[row].double() - y[0]).abs().max().item(), (pool[slot].double() - after[0]).abs().max().item())
    assert torch.equal(out[1], torch.zeros(HEADS, HEAD_DIM))  # padded row: no output
    untouched = [0, 1, 3, 5]
    assert torch.equal(pool[untouched], before[untouched])
    print(f"selective_state_update_cpu vs fp64 recurrence: max abs error {worst:.2e}")


def test_states_are_bit_identical_however_the_tokens_were_split() -> None:
    """What the engine's cache relies on to be exact: a prefix's state is the same whether it
    was prefilled alone, in a batch, in two chunks, or partly decoded."""
    t = inputs(150, seed=4)
    zero = torch.zeros(1, HEADS, HEAD_DIM, D_STATE)
    _, _, whole, _ = scan(t, [0, 150], zero)

    first = {k: v[:, :64] if v.dim() > 1 and k != "A" else v for k, v in t.items()}
    rest = {k: v[:, 64:] if v.dim() > 1 and k != "A" else v for k, v in t.items()}
    _, _, half, _ = scan(first, [0, 64], zero)
    _, _, split, _ = scan(rest, [0, 86], half)
    assert torch.equal(split, whole)

    other = inputs(40, seed=5)
    batch = {k: torch.cat([other[k], t[k]], 1) if t[k].dim() > 1 and k != "A" else t[k] for k in t}
    _, _, in_batch, _ = scan(batch, [0, 40, 190], torch.zeros(2, HEADS, HEAD_DIM, D_STATE))
    assert torch.equal(in_batch[1], whole[0])

    _, _, pool, _ = scan({k: v[:, :100] if v.dim() > 1 and k != "A" else v for k, v in t.items()}, [0, 100], zero)
    for i in range(100, 150):
        out = torch.empty(1, HEADS, HEAD_DIM)
        selective_state_update_cpu(
            pool, t["x"][0, i : i + 1], t["dt"][0, i : i + 1][:, :, None].expand(-1, -1, HEAD_DIM),
            t["A"][:, None, None].expand(-1, HEAD_DIM, D_STATE), t["B"][0, i : i + 1], t["C"][0, i : i + 1],
            t["D"][:, None].expand(-1, HEAD_DIM), dt_bias=t["dt_bias"][:, None].expand(-1, HEAD_DIM), dt_softplus=True,
            state_batch_indices=torch.tensor([0]), out=out,
        )  # fmt: skip
    assert torch.equal(pool, whole)


# ---------------------------------------------------------------- vs transformers' NemotronH


@pytest.fixture(scope="module")
def hf_ops():
    modeling = pytest.importorskip("transformers.models.nemotron_h.modeling_nemotron_h")
    return modeling


def test_chunk_scan_and_decode_agree_with_transformers(hf_ops) -> None:
    """transformers' torch `mamba2_chunk_scan` (chunked SSD) and `mamba2_selective_state_update`
    on one sequence, against ours on the same inputs."""
    t = inputs(150, seed=6)
    gen = torch.Generator().manual_seed(7)
    init = torch.randn(1, HEADS, HEAD_DIM, D_STATE, generator=gen)
    y, _, ours, _ = scan(t, [0, 150], init)
    hf_y, hf_state = hf_ops.mamba2_chunk_scan(
        t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size=CHUNK, D=t["D"], dt_bias=t["dt_bias"], initial_states=init,
        dt_softplus=True, return_final_states=True,
    )  # fmt: skip
    scan_error = max((y - hf_y).abs().max().item(), (ours[0] - hf_state[0]).abs().max().item())
    torch.testing.assert_close(y, hf_y, **FP32_TOL)
    torch.testing.assert_close(ours[0], hf_state[0], **FP32_TOL)

    pool, hf_pool = ours.clone(), ours.clone()
    x, dt = torch.randn(1, HEADS, HEAD_DIM, generator=gen), torch.randn(1, HEADS, generator=gen)
    B, C = torch.randn(1, GROUPS, D_STATE, generator=gen), torch.randn(1, GROUPS, D_STATE, generator=gen)
    wide = dict(
        dt=dt[:, :, None].expand(-1, -1, HEAD_DIM), A=t["A"][:, None, None].expand(-1, HEAD_DIM, D_STATE), B=B, C=C,
        D=t["D"][:, None].expand(-1, HEAD_DIM), dt_bias=t["dt_bias"][:, None].expand(-1, HEAD_DIM), dt_softplus=True,
    )  # fmt: skip
    out = torch.empty(1, HEADS, HEAD_DIM)
    selective_state_update_cpu(pool, x, state_batch_indices=torch.tensor([0]), out=out, **wide)
    hf_out = hf_ops.mamba2_selective_state_update(hf_pool, x, **wide)
    decode_error = max((out - hf_out).abs().max().item(), (pool - hf_pool).abs().max().item())
    torch.testing.assert_close(out, hf_out, **FP32_TOL)
    torch.testing.assert_close(pool, hf_pool, **FP32_TOL)
    print(f"vs transformers NemotronH: chunk scan max abs error {scan_error:.2e}, decode {decode_error:.2e}")


def test_causal_conv_agrees_with_transformers(hf_ops) -> None:
    """Mamba2's route calls the same causal-conv ops as GDN (the `_triton` names on CPU)."""
    gen = torch.Generator().manual_seed(8)
    dim, width, length = 24, 4, 37
    x = torch.randn(1, dim, length, generator=gen).to(torch.bfloat16)
    weight, bias = torch.randn(dim, width, generator=gen).to(torch.bfloat16), torch.randn(dim, generator=gen).to(torch.bfloat16)
    pool = torch.zeros(3, dim, width - 1, dtype=torch.bfloat16)
    ours = causal_conv1d_fn_cpu(
        x[0], weight, bias, activation="silu", conv_states=pool, has_initial_state=torch.tensor([False]),
        cache_indices=torch.tensor([2]), query_start_loc=torch.tensor([0, length]), seq_lens_cpu=[length],
    )  # fmt: skip
    hf = hf_ops.causal_conv1d_fn(x, weight, bias, activation="silu")
    prefill_error = (ours.float() - hf[0].float()).abs().max().item()
    torch.testing.assert_close(ours.float(), hf[0].float(), atol=2e-2, rtol=2e-2)  # bf16 outputs
    assert torch.equal(pool[2], x[0, :, -(width - 1) :])  # the window: the last inputs, as stored

    step = torch.randn(1, dim, generator=gen).to(torch.bfloat16)
    hf_state = torch.cat([torch.zeros(1, dim, 1, dtype=torch.bfloat16), pool[2:3]], -1)  # transformers keeps one more
    hf_step = hf_ops.causal_conv1d_update(step[:, :, None], hf_state, weight, bias, activation="silu")
    ours_step = causal_conv1d_update_cpu(step, pool, weight, bias, "silu", conv_state_indices=torch.tensor([2]))
    decode_error = (ours_step.float() - hf_step[:, :, 0].float()).abs().max().item()
    torch.testing.assert_close(ours_step.float(), hf_step[:, :, 0].float(), atol=2e-2, rtol=2e-2)
    assert torch.equal(pool[2], hf_state[0, :, 1:])
    print(f"causal conv vs transformers NemotronH: prefill max abs error {prefill_error:.2e}, decode {decode_error:.2e}")


def test_gated_rmsnorm_runs_sglangs_torch_path_and_agrees_with_transformers() -> None:
    """No op of ours: on CPU `Mixer2RMSNormGated` (a BaseFusedOp without `forward_cpu`) falls back
    to its own torch `forward_native`, which must match transformers' `Zamba2RMSNormGated`
    (silu-gate, then RMS-normalise per group of intermediate / n_groups channels)."""
    from mcinspect_engine_hooks.cpu_engine import patches

    patches.install()  # before sglang is first imported: CPU stand-ins for CUDA-only imports
    mixer_norm = pytest.importorskip("sglang.srt.layers.attention.mamba.mixer2_rms_norm_gated")
    from sglang.kernels.fused_op import BaseFusedOp
    from transformers.models.zamba2.modeling_zamba2 import Zamba2RMSNormGated

    norm_class = mixer_norm.Mixer2RMSNormGated
    below = norm_class.__mro__[: norm_class.__mro__.index(BaseFusedOp)]
    assert not any("forward_cpu" in klass.__dict__ for klass in below)
    width, groups = 64, 2
    gen = torch.Generator().manual_seed(9)
    weight = (1 + 0.1 * torch.randn(width, generator=gen)).to(torch.bfloat16)
    x, gate = torch.randn(7, width, generator=gen).to(torch.bfloat16), torch.randn(7, width, generator=gen).to(torch.bfloat16)
    fields = dict(
        n_groups=groups,
        group_size=width // groups,
        use_rms_norm=True,
        variance_epsilon=1e-5,
        weight=weight,
        tp_size=1,
        use_attn_tp_group=False,
    )
    sglang_out = norm_class.forward_native(type("NormFields", (), fields)(), x, gate)
    hf = Zamba2RMSNormGated(width, group_size=width // groups, eps=1e-5).to(torch.bfloat16)
    hf.weight.data.copy_(weight)
    with torch.no_grad():
        hf_out = hf(x, gate)
    torch.testing.assert_close(sglang_out.float(), hf_out.float(), atol=2e-2, rtol=2e-2)
    print(
        f"gated RMSNorm (sglang forward_native) vs transformers: max abs error {(sglang_out.float() - hf_out.float()).abs().max().item():.2e}"
    )
