"""Mamba2's selective state-space scan: chunked prefill over a flattened batch, recurrent decode.

Torch versions of `mamba_chunk_scan_combined` and `selective_state_update` from
`sglang/kernels/ops/mamba/triton_ops/` (Triton only), with the semantics sglang 0.5.23's
`layers/attention/mamba/mamba.py` relies on. Per head h (of H), with the state S kept as
[P, N] like sglang's pool (`temporal[slot]` is [H, P, N]: head_dim P, d_state N), and B, C
of head h taken from group h // (H // G):

    dt_t = softplus(dt_t + dt_bias)   (clamped to dt_limit)
    S_t = exp(A dt_t) S_{t-1} + (dt_t B_t) x_t      (x_t: [P], B_t: [N], outer product)
    y_t = S_t C_t + D x_t            (times silu(z_t) when z is given)

Both ops run the same fp32 token step (`_step`), so a state is bit-identical however its
tokens were split between prefill chunks, batches and decode steps: the property the
engine's cache relies on to be exact (a prefix hit resumes where a full run would be). The
transcendental functions (softplus, exp) go through float64 and are rounded to fp32 once:
torch computes them with vector or scalar code depending on a tensor's size and strides,
and the two differ in the last fp32 bit; rounded from float64 they agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PAD_SLOT_ID = -1
"""Slot index sglang uses for padded batch rows (`triton_ops.mamba_ssm.PAD_SLOT_ID`)."""

_SOFTPLUS_THRESHOLD = 20.0  # the Triton kernels' softplus is linear above it


def mamba_chunk_scan_combined_cpu(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    chunk_indices: torch.Tensor | None = None,
    chunk_offsets: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    out: torch.Tensor | None = None,
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    return_intermediate_states: bool = False,
    state_dtype: torch.dtype | None = None,
    return_track_states: bool = False,
    track_seq_idx: torch.Tensor | None = None,
    track_end_locs: torch.Tensor | None = None,
):
    """Prefill scan with the Triton function's arguments, outputs and return conventions.

    x: (batch, T, H, P); dt: (batch, T, H); A: (H,); B, C: (batch, T, G, N); D: (H,) or
    (H, P); z like x. Sequences: with `cu_seqlens` (N + 1, needs `return_varlen_states`,
    batch 1) the N sequences lie end to end; else `seq_idx` (batch, T) splits each row,
    else each batch row is one sequence. Sequence i starts from `initial_states[i]`
    ([H, P, N]; zeros without). `chunk_indices` / `chunk_offsets` (the Triton kernels'
    logical-chunk bookkeeping) are accepted and derived from the sequence bounds instead.

    The output y is written into `out` (sglang passes a view of its buffer; the Triton
    function does not return y either). The states it can return, in `state_dtype` (default C's dtype)
    except the fp32 final states:
    - intermediate `states` (batch, ceil(T / chunk_size), H, P, N): ONE chunk grid over the
      flattened row, as the Triton kernel's state passing leaves it. Row 0 is the first
      sequence's initial state; row c > 0 the state at flat position c * chunk_size of the
      sequence that holds flat token c * chunk_size - 1 (its state after its tokens up to
      there). A sequence that does not start on the grid has its own states on it only at
      flat multiples of chunk_size: what #37836 is about;
    - final states (batch, H, P, N): after each row's last token;
    - varlen states (N, H, P, N): after each sequence;
    - track states (1, K, H, P, N): sequence `track_seq_idx[k]` after its tokens before flat
      position `track_end_locs[k]` (extra_buffer's checkpoints off the grid).

    Returns, as the Triton function: (states, varlen, track) with `return_track_states`;
    else (states[, final][, varlen]) with `return_intermediate_states`; else
    final / varlen / (final, varlen) / None.
    """
    if not return_varlen_states:
        cu_seqlens = None
    elif cu_seqlens is None:
        raise ValueError("cu_seqlens must be provided if return_varlen_states is True")
    if return_track_states and not return_varlen_states:
        raise ValueError("return_track_states requires return_varlen_states (cu_seqlens mode)")
    batch, seqlen, num_heads, head_dim = x.shape
    if cu_seqlens is not None and batch != 1:
        raise ValueError(f"with cu_seqlens the batch size must be 1, got {batch}")
    if A.shape != (num_heads,):
        raise ValueError(f"A must be ({num_heads},), got {tuple(A.shape)}")
    bounds = _sequence_bounds(batch, seqlen, cu_seqlens, seq_idx)
    state_dtype = C.dtype if state_dtype is None else state_dtype
    num_chunks = -(-seqlen // chunk_size)
    track = []
    if return_track_states and track_seq_idx is not None:
        track = list(zip(track_seq_idx.tolist(), track_end_locs.tolist()))
    # Flat positions (row-major over batch rows) of the last token before each state kept:
    # chunk grid points, sequence ends, tracked checkpoints.
    grid = {(r, c): r * seqlen + c * chunk_size - 1 for r in range(batch) for c in range(1, num_chunks)}
    wanted = set(grid.values()) | {end - 1 for start, end in bounds if end > start}
    wanted |= {end - 1 for i, end in track if end > bounds[i][0]}

    inputs = _flatten_inputs(x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit)
    init = _initial(initial_states, len(bounds), num_heads, head_dim, B.shape[-1], x.device)
    y, kept = _scan(inputs, bounds, init, wanted)
    if out is not None:
        out.copy_(y.view(out.shape))

    def after(seq: int, end: int) -> torch.Tensor:
        """Sequence `seq`'s state after its tokens before flat position `end`."""
        return kept[end - 1] if end > bounds[seq][0] else init[seq]

    states = init.new_zeros(batch, num_chunks, num_heads, head_dim, B.shape[-1])
    owner = _flat_owner(bounds, batch * seqlen)
    for r in range(batch):
        if num_chunks and owner[r * seqlen] >= 0:
            states[r, 0] = init[owner[r * seqlen]]
    for (r, c), token in grid.items():
        if owner[token] >= 0:
            states[r, c] = after(owner[token], token + 1)
    states = states.to(state_dtype)
    varlen = torch.stack([after(i, end) for i, (_, end) in enumerate(bounds)]).to(state_dtype)
    final = torch.stack([varlen[_last_sequence(bounds, r, seqlen)].float() for r in range(batch)])

    if return_track_states:
        tracked = torch.stack([after(i, end) for i, end in track]).to(state_dtype).unsqueeze(0) if track else None
        return states, varlen, tracked
    if return_intermediate_states:
        parts = [states] + ([final] if return_final_states else []) + ([varlen] if return_varlen_states else [])
        return parts[0] if len(parts) == 1 else tuple(parts)
    if return_varlen_states:
        return (final, varlen) if return_final_states else varlen
    return final if return_final_states else None


def selective_state_update_cpu(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
    disable_state_update: bool = False,
    intermediate_states_buffer: torch.Tensor | None = None,
    cache_steps: int | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
) -> None:
    """Decode (and linear target verify): a few tokens per row against each row's stored state.

    state: (slots, H, P, N) pool; x: (batch, H, P), or (batch, T, H, P) for verify; dt like x
    (sglang expands the per-head dt over P); A: (H, P, N); B, C: (batch[, T], G, N); D,
    dt_bias: (H, P); z like x. Row i reads and (unless `disable_state_update`) writes
    `state[state_batch_indices[i]]`; rows whose index is `pad_slot_id` are skipped (output
    zero, state untouched). With `intermediate_states_buffer` the state after step t is also
    stored at `buffer[intermediate_state_indices[i] (else the state index), t]`;
    `cache_steps` is accepted for call compatibility. The output goes into `out` (x's shape).
    Tree verify (`retrieve_parent_token`) is not supported, as in sglang's own CPU backends.
    """
    if retrieve_parent_token is not None:
        raise NotImplementedError("selective_state_update_cpu: tree verify (topk > 1) is not supported on CPU")
    if out is None:
        raise ValueError("selective_state_update_cpu needs the preallocated `out`")
    multi = x.dim() == 4
    xs = x if multi else x.unsqueeze(1)
    batch, steps, num_heads, head_dim = xs.shape
    dts = dt if multi else dt.unsqueeze(1)
    Bs, Cs = (B, C) if multi else (B.unsqueeze(1), C.unsqueeze(1))
    zs = None if z is None else (z if multi else z.unsqueeze(1))
    outs = out.view(batch, steps, num_heads, head_dim)

    rows = torch.arange(batch, device=x.device)
    slots = state_batch_indices.long() if state_batch_indices is not None else rows
    live = slots != pad_slot_id
    rows, slots = rows[live], slots[live]
    outs.zero_()
    current = state[slots].float()
    group = num_heads // B.shape[-2]
    a = A.float()
    cache_rows = None
    if intermediate_states_buffer is not None:
        cache_rows = intermediate_state_indices.long()[live] if intermediate_state_indices is not None else slots
    for t in range(steps):
        step_dt = _gate_dt(dts[rows, t].float(), dt_bias, dt_softplus, (0.0, float("inf")))
        b = Bs[rows, t].float().repeat_interleave(group, dim=-2)
        c = Cs[rows, t].float().repeat_interleave(group, dim=-2)
        current, y = _step(current, xs[rows, t].float(), step_dt, a, b, c, None if D is None else D.float())
        if zs is not None:
            y = y * F.silu(zs[rows, t].float())
        outs[rows, t] = y.to(outs.dtype)
        if cache_rows is not None:
            keep = cache_rows >= 0
            intermediate_states_buffer[cache_rows[keep], t] = current[keep].to(intermediate_states_buffer.dtype)
    if not disable_state_update:
        state[slots] = current.to(state.dtype)


def _step(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token for n rows, fp32, in the Triton kernels' operation order.

    state (n, H, P, N); x (n, H, P); dt (n, H, P) or broadcastable (n, H, 1); A (H, P, N) or
    (H, 1, 1); B, C (n, H, N); D (H, P) or (H, 1). Returns the new state and y (n, H, P).
    """
    decay = torch.exp(A.double() * dt[..., None].double()).float()
    state = state * decay + (B[:, :, None, :] * dt[..., None]) * x[..., None]
    y = (state * C[:, :, None, :]).sum(-1)
    if D is not None:
        y = y + x * D
    return state, y


def _gate_dt(dt: torch.Tensor, dt_bias: torch.Tensor | None, softplus: bool, limit: tuple[float, float]) -> torch.Tensor:
    """softplus(dt + dt_bias) (linear above the threshold), clamped; fp32, via float64."""
    if dt_bias is not None:
        dt = dt + dt_bias.float()
    if softplus:
        dt = F.softplus(dt.double(), threshold=_SOFTPLUS_THRESHOLD).float()
    if limit != (0.0, float("inf")):
        dt = dt.clamp(min=limit[0], max=limit[1])
    return dt


def _flatten_inputs(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    softplus: bool,
    limit: tuple[float, float],
) -> dict[str, torch.Tensor | None]:
    """Token-major fp32 inputs of `_step`, B / C repeated per head, dt gated."""
    num_heads, head_dim = x.shape[-2:]
    group = num_heads // B.shape[-2]
    flat_dt = _gate_dt(dt.reshape(-1, num_heads).float(), dt_bias, softplus, limit)
    return {
        "x": x.reshape(-1, num_heads, head_dim).float(),
        "dt": flat_dt[..., None],
        "A": A.float()[:, None, None],
        "B": B.reshape(-1, *B.shape[-2:]).float().repeat_interleave(group, dim=-2),
        "C": C.reshape(-1, *C.shape[-2:]).float().repeat_interleave(group, dim=-2),
        "D": None if D is None else (D.float() if D.dim() == 2 else D.float()[:, None]),
        "z": None if z is None else z.reshape(-1, num_heads, head_dim).float(),
    }


def _scan(
    inputs: dict[str, torch.Tensor | None], bounds: list[tuple[int, int]], init: torch.Tensor, wanted: set[int]
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """All sequences side by side, one token position at a time; returns y (tokens, H, P)
    fp32 and the states after the flat tokens in `wanted`."""
    x = inputs["x"]
    y = torch.zeros_like(x)
    kept: dict[int, torch.Tensor] = {}
    starts = torch.tensor([s for s, _ in bounds], dtype=torch.long)
    lens = torch.tensor([e - s for s, e in bounds], dtype=torch.long)
    states = init.clone()
    for t in range(int(lens.max()) if len(bounds) else 0):
        rows = (lens > t).nonzero().squeeze(1)
        tok = starts[rows] + t
        state, out = _step(states[rows], x[tok], inputs["dt"][tok], inputs["A"], inputs["B"][tok], inputs["C"][tok], inputs["D"])
        if inputs["z"] is not None:
            out = out * F.silu(inputs["z"][tok])
        y[tok] = out
        states[rows] = state
        for i, flat in enumerate(tok.tolist()):
            if flat in wanted:
                kept[flat] = state[i].clone()
    return y, kept


def _sequence_bounds(batch: int, seqlen: int, cu_seqlens: torch.Tensor | None, seq_idx: torch.Tensor | None) -> list[tuple[int, int]]:
    """[start, end) of each sequence in flat (row-major) token positions."""
    if cu_seqlens is not None:
        edges = cu_seqlens.tolist()
        return list(zip(edges[:-1], edges[1:]))
    if seq_idx is None:
        return [(r * seqlen, (r + 1) * seqlen) for r in range(batch)]
    bounds = []
    for r in range(batch):
        ids = seq_idx[r].tolist()
        start = 0
        for t in range(1, seqlen + 1):
            if t == seqlen or ids[t] != ids[t - 1]:
                bounds.append((r * seqlen + start, r * seqlen + t))
                start = t
    return bounds


def _flat_owner(bounds: list[tuple[int, int]], total: int) -> list[int]:
    owner = [-1] * total
    for i, (start, end) in enumerate(bounds):
        owner[start:end] = [i] * (end - start)
    return owner


def _last_sequence(bounds: list[tuple[int, int]], row: int, seqlen: int) -> int:
    """The sequence that ends a batch row (its state is the row's final state)."""
    return max(i for i, (s, e) in enumerate(bounds) if s < (row + 1) * seqlen and e > row * seqlen)


def _initial(
    initial_states: torch.Tensor | None, num_seqs: int, num_heads: int, head_dim: int, d_state: int, device: torch.device
) -> torch.Tensor:
    if initial_states is None:
        return torch.zeros(num_seqs, num_heads, head_dim, d_state, device=device)
    if initial_states.shape[0] != num_seqs:
        raise ValueError(f"{initial_states.shape[0]} initial states for {num_seqs} sequences")
    return initial_states.float().clone()
