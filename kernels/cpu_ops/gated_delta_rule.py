"""Gated delta rule (Qwen3-Next linear attention): gating, chunked prefill, recurrent decode.

Torch versions of the sgl_kernel CPU ops sglang 0.5.23 calls on CPU, with the semantics of
the FLA Triton kernels it uses on GPU (`sglang/kernels/ops/attention/fla/chunk*.py`,
`.../linear/fused_sigmoid_gating_recurrent.py`, `.../linear/fused_gdn_gating.py`).

Per value head, with the state S kept as [V, K] like sglang's pool (`ssm_states[slot]` is
[HV, V, K]) and q, k l2-normalised when asked, q scaled by `scale` (default K ** -0.5):

    S_t = exp(g_t) S_{t-1} + beta_t (v_t - exp(g_t) S_{t-1} k_t) k_t^T
    o_t = S_t q_t

q and k may have fewer heads than v (grouped heads): value head h reads q/k head
h // (HV // H). All arithmetic is fp32, as in the Triton kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_SIZE = 64
"""FLA's chunk length. The extra_buffer prefix cache indexes the chunk states `h` in these units."""

_L2NORM_EPS = 1e-6  # l2norm_fwd's default and the decode kernel's constant


def fused_gdn_gating_cpu(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token decay and write strength: g = -exp(A_log) * softplus(a + dt_bias), sigmoid(b).

    a, b: (tokens, HV); A_log, dt_bias: (HV,). `beta`/`threshold` are softplus's (it is
    linear above `threshold`). Returns g (1, tokens, HV) fp32 and beta (1, tokens, HV) in
    b's dtype, the shapes `chunk_gated_delta_rule_cpu` takes.
    """
    g = _decay(A_log, a, dt_bias, beta, threshold)
    return g.unsqueeze(0), torch.sigmoid(b.float()).to(b.dtype).unsqueeze(0)


def chunk_gated_delta_rule_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    initial_state_indices: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    head_first: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    inplace_update: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chunked prefill over variable-length sequences, with FLA's outputs and state handling.

    q, k: (B, T, H, K); v: (B, T, HV, V); g (log decay, e.g. from `fused_gdn_gating_cpu`),
    beta: (B, T, HV). With `cu_seqlens` (N + 1), B is 1 and the N sequences lie end to end.
    Sequence i starts from `initial_state[initial_state_indices[i]]` ([HV, V, K] pool rows;
    a negative index or no pool means zeros) and, with `inplace_update`, its final state is
    written back there (never for a negative index).

    Returns (o, final_state, h):
    - o: (B, T, HV, V) in q's dtype;
    - final_state: (N, HV, V, K) fp32, the state after each sequence (FLA itself returns None
      here and only writes the pool; sglang's CPU op returns it);
    - h: the state entering every 64-token chunk, chunked per sequence like FLA:
      (1, sum_i ceil(len_i / 64), HV, V, K) with `cu_seqlens`, else (B, ceil(T / 64), ...),
      in k's dtype. Sequence i's chunks start at row sum_{j<i} ceil(len_j / 64), and row
      offset_i + c is the state after the first c * 64 tokens of that sequence; this is what
      sglang's extra_buffer tracking gathers (`h.squeeze(0)[track_ssm_h_src]`).
    """
    if head_first:
        raise NotImplementedError("head_first=True is deprecated in FLA and not supported")
    batch, seqlen, _, key_dim = k.shape
    num_v_heads, value_dim = v.shape[-2:]
    if cu_seqlens is not None and batch != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1, got {batch}")
    bounds = cu_seqlens.tolist() if cu_seqlens is not None else [i * seqlen for i in range(batch + 1)]
    num_seqs = len(bounds) - 1
    if initial_state_indices is not None:
        slots = initial_state_indices.tolist()
    else:
        slots = list(range(num_seqs)) if initial_state is not None else [-1] * num_seqs
    if len(slots) != num_seqs:
        raise ValueError(f"{len(slots)} initial state indices for {num_seqs} sequences")

    qf, kf = _prepare_qk(q, k, num_v_heads, use_qk_l2norm_in_kernel)
    qf = qf * (key_dim**-0.5 if scale is None else scale)
    vf = v.reshape(-1, num_v_heads, value_dim).float()
    gf = g.reshape(-1, num_v_heads).float()
    bf = beta.reshape(-1, num_v_heads).float()

    out = torch.zeros_like(vf)
    final = vf.new_zeros(num_seqs, num_v_heads, value_dim, key_dim)
    chunk_states = []
    for i, (start, end, slot) in enumerate(zip(bounds[:-1], bounds[1:], slots)):
        if initial_state is not None and slot >= 0:
            # a copy: h keeps it, and the write-back below overwrites the pool row
            state = initial_state[slot].to(torch.float32, copy=True)
        else:
            state = vf.new_zeros(num_v_heads, value_dim, key_dim)
        for c0 in range(start, end, CHUNK_SIZE):
            c1 = min(c0 + CHUNK_SIZE, end)
            chunk_states.append(state)
            out[c0:c1], state = _chunk_forward(qf[c0:c1], kf[c0:c1], vf[c0:c1], gf[c0:c1], bf[c0:c1], state)
        final[i] = state
        if inplace_update and initial_state is not None and slot >= 0:
            initial_state[slot] = state.to(initial_state.dtype)

    state_shape = (num_v_heads, value_dim, key_dim)
    h = torch.stack(chunk_states) if chunk_states else vf.new_zeros(0, *state_shape)
    rows = 1 if cu_seqlens is not None else batch
    h = h.view(rows, len(chunk_states) // rows, *state_shape)
    return out.to(q.dtype).view(v.shape), final, h.to(k.dtype)


def fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    *,
    scale: float | None = None,
    is_kda: bool = False,
    disable_state_update: bool = False,
    intermediate_states_buffer: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    cache_steps: int | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token-by-token recurrence with the gating fused in: decode and (linear) target verify.

    q, k: (B, T, H, K); v: (B, T, HV, V); a, b: raw gate inputs, (B*T, HV). With
    `cu_seqlens` (N + 1) the N sequences lie end to end (decode: one token each). Sequence i
    reads `initial_state_source[initial_state_indices[i]]` ([HV, V, K]; a negative index
    means zeros and no write-back) and writes its final state back unless
    `disable_state_update`. With `intermediate_states_buffer` (verify), the state after
    token t is also stored at `buffer[intermediate_state_indices[i], t]` when that index is
    non-negative; `cache_steps` is accepted for call compatibility (the buffer's shape
    gives the step pitch). KDA and tree verify (`retrieve_parent_token`) are not supported.
    Returns o with v's shape, in q's dtype.
    """
    if is_kda:
        raise NotImplementedError("fused_sigmoid_gating_delta_rule_update_cpu: KDA gating is not supported")
    if retrieve_parent_token is not None:
        raise NotImplementedError("fused_sigmoid_gating_delta_rule_update_cpu: tree verify is not supported")
    if intermediate_states_buffer is not None and intermediate_state_indices is None:
        raise ValueError("intermediate_states_buffer needs intermediate_state_indices")
    batch, seqlen, _, key_dim = k.shape
    num_v_heads, value_dim = v.shape[-2:]
    if cu_seqlens is not None:
        bounds = cu_seqlens.long()
    else:
        bounds = torch.arange(batch + 1, device=q.device) * seqlen
    starts, lens = bounds[:-1], bounds[1:] - bounds[:-1]

    qf, kf = _prepare_qk(q, k, num_v_heads, use_qk_l2norm_in_kernel)
    qf = qf * (key_dim**-0.5 if scale is None else scale)
    vf = v.reshape(-1, num_v_heads, value_dim).float()
    decay = _decay(A_log, a.reshape(-1, num_v_heads), dt_bias, softplus_beta, softplus_threshold).exp()
    write = torch.sigmoid(b.reshape(-1, num_v_heads).float())

    slots = initial_state_indices.long()
    has_slot = slots >= 0
    states = vf.new_zeros(len(slots), num_v_heads, value_dim, key_dim)
    states[has_slot] = initial_state_source[slots[has_slot]].float()
    steps = intermediate_state_indices.long() if intermediate_states_buffer is not None else None

    out = torch.zeros_like(vf)
    for t in range(int(lens.max()) if len(lens) else 0):
        rows = (lens > t).nonzero().squeeze(1)  # sequences that still have a token t
        tok = starts[rows] + t
        state = _recurrent_step(states[rows], qf[tok], kf[tok], vf[tok], decay[tok], write[tok])
        out[tok] = torch.einsum("nhvk,nhk->nhv", state, qf[tok])
        states[rows] = state
        if steps is not None:
            cached = steps[rows] >= 0
            intermediate_states_buffer[steps[rows][cached], t] = state[cached].to(intermediate_states_buffer.dtype)
    if not disable_state_update:
        initial_state_source[slots[has_slot]] = states[has_slot].to(initial_state_source.dtype)
    return out.to(q.dtype).view(v.shape)


def _decay(A_log: torch.Tensor, a: torch.Tensor, dt_bias: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    """Log decay g = -exp(A_log) * softplus(a + dt_bias), fp32 (tokens, HV)."""
    return -A_log.float().exp() * F.softplus(a.float() + dt_bias.float(), beta=beta, threshold=threshold)


def _prepare_qk(q: torch.Tensor, k: torch.Tensor, num_v_heads: int, l2norm: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Flatten to (tokens, HV, K) fp32, l2-normalised if asked, q/k heads repeated per value head."""
    qf = q.reshape(-1, *q.shape[-2:]).float()
    kf = k.reshape(-1, *k.shape[-2:]).float()
    if l2norm:
        qf = qf * torch.rsqrt((qf * qf).sum(-1, keepdim=True) + _L2NORM_EPS)
        kf = kf * torch.rsqrt((kf * kf).sum(-1, keepdim=True) + _L2NORM_EPS)
    group = num_v_heads // qf.shape[-2]
    return qf.repeat_interleave(group, dim=-2), kf.repeat_interleave(group, dim=-2)


def _recurrent_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    decay: torch.Tensor,
    write: torch.Tensor,
) -> torch.Tensor:
    """One token for n rows: state (n, HV, V, K), k (n, HV, K), v (n, HV, V), decay/write (n, HV)."""
    state = state * decay[..., None, None]
    delta = (v - torch.einsum("nhvk,nhk->nhv", state, k)) * write[..., None]
    return state + delta[..., :, None] * k[..., None, :]


def _chunk_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk of C <= 64 tokens in closed form (FLA's WY representation).

    q (already scaled), k: (C, HV, K); v: (C, HV, V); g, beta: (C, HV); state: (HV, V, K).
    With G the within-chunk cumulative log decay, the per-token updates
    d_i = beta_i (v_i - exp(g_i) S_{i-1} k_i) solve the unit lower-triangular system
    (I + A) d = beta v - beta exp(G) S_0 k, A_ij = beta_i exp(G_i - G_j) k_i.k_j (i > j),
    after which outputs and the end state follow without a per-token loop.
    Returns o (C, HV, V) and the state after the chunk.
    """
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # head first
    cum = g.transpose(0, 1).cumsum(-1)  # (HV, C)
    beta = beta.transpose(0, 1)
    size = cum.shape[-1]
    causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    # exp(G_i - G_j) <= 1 for i >= j; mask the rest before exp so it cannot overflow.
    pair_decay = (cum[:, :, None] - cum[:, None, :]).masked_fill(~causal, float("-inf")).exp()
    system = torch.eye(size, device=q.device) + (beta[..., None] * (k @ k.transpose(-1, -2)) * pair_decay).tril(-1)
    rhs = torch.cat([beta[..., None] * v, (beta * cum.exp())[..., None] * k], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = solved.split([v.shape[-1], k.shape[-1]], dim=-1)
    delta = u - w @ state.transpose(-1, -2)  # (HV, C, V)
    out = cum.exp()[..., None] * (q @ state.transpose(-1, -2)) + ((q @ k.transpose(-1, -2)) * pair_decay) @ delta
    tail_decay = (cum[:, -1:] - cum).exp()  # exp(G_last - G_j)
    state = cum[:, -1, None, None].exp() * state + delta.transpose(-1, -2) @ (tail_decay[..., None] * k)
    return out.transpose(0, 1), state
