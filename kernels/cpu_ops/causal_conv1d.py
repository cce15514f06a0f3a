"""Causal depthwise conv1d with a per-slot rolling window (GDN's short convolution).

Torch versions of `sgl_kernel.mamba.causal_conv1d_fn_cpu` (prefill) and
`causal_conv1d_update_cpu` (decode / verify), following sglang 0.5.23's Triton kernels in
`sglang/kernels/ops/mamba/causal_conv1d_triton.py`. A slot's conv state is
`conv_states[slot, :, :width - 1]`, oldest token first; only those columns are read or written.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PAD_SLOT_ID = -1
"""Slot index sglang uses for padded batch rows (`causal_conv1d_triton.PAD_SLOT_ID`)."""


def causal_conv1d_fn_cpu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | bool | None = None,
    conv_states: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    cache_indices: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    seq_lens_cpu: list[int] | None = None,
    pad_slot_id: int = PAD_SLOT_ID,
) -> torch.Tensor:
    """Prefill convolution over a flattened batch of variable-length sequences.

    x: (dim, total_tokens), sequences laid end to end as given by `query_start_loc` (N + 1).
    weight: (dim, width); bias: (dim,). Sequence i starts from the window in
    `conv_states[cache_indices[i]]` when `has_initial_state[i]`, else from zeros, and leaves
    the last `width - 1` inputs of (window ++ x_i) there. Rows whose slot is `pad_slot_id`
    and empty sequences are skipped (their output is zero; the Triton kernel leaves it
    unwritten). `seq_lens_cpu` is accepted for call compatibility: lengths come from
    `query_start_loc`. Returns (dim, total_tokens) in x's dtype.
    """
    silu = _is_silu(activation)
    dim, total = x.shape
    state_len = weight.shape[1] - 1
    bounds = query_start_loc.tolist() if query_start_loc is not None else [0, total]
    slots = cache_indices.tolist() if cache_indices is not None else list(range(len(bounds) - 1))
    with_prior = has_initial_state.tolist() if has_initial_state is not None else [False] * len(slots)
    out = torch.zeros_like(x)
    for start, end, slot, use_prior in zip(bounds[:-1], bounds[1:], slots, with_prior):
        if slot == pad_slot_id or end == start:
            continue
        if use_prior:
            prior = conv_states[slot, :, :state_len].to(x.dtype)
        else:
            prior = x.new_zeros(dim, state_len)
        window = torch.cat([prior, x[:, start:end]], dim=1)
        out[:, start:end] = _depthwise_conv(window.unsqueeze(0), weight, bias, silu)[0]
        if conv_states is not None:
            conv_states[slot, :, :state_len] = window[:, -state_len:]
    return out


def causal_conv1d_update_cpu(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | bool | None = None,
    conv_state_indices: torch.Tensor | None = None,
    intermediate_conv_window: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    retrieve_next_token: torch.Tensor | None = None,
    retrieve_next_sibling: torch.Tensor | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
    pad_slot_id: int = PAD_SLOT_ID,
) -> torch.Tensor:
    """Convolve a few new tokens per row against each row's stored window, in place.

    x: (batch, dim) for one token per row, or (batch, dim, seqlen) for target verify.
    Row i uses and updates `conv_state[conv_state_indices[i]]`; rows whose slot is
    `pad_slot_id` are skipped (zero output, state untouched). With
    `intermediate_conv_window` (verify), the window after each token t is also stored at
    `intermediate_conv_window[intermediate_state_indices[i], t, :, :width - 1]`, so the
    scheduler can restore the window at the accepted length. Tree verify (the retrieve_*
    tensors) is not supported, as in sglang's own CPU backend. Returns x's shape and dtype.
    """
    if any(t is not None for t in (retrieve_next_token, retrieve_next_sibling, retrieve_parent_token)):
        raise NotImplementedError("causal_conv1d_update_cpu: tree verify (topk > 1) is not supported on CPU")
    if intermediate_conv_window is not None and intermediate_state_indices is None:
        raise ValueError("intermediate_conv_window needs intermediate_state_indices")
    silu = _is_silu(activation)
    tokens = x.unsqueeze(-1) if x.dim() == 2 else x
    batch, _, seqlen = tokens.shape
    state_len = weight.shape[1] - 1
    rows = torch.arange(batch, device=x.device)
    slots = conv_state_indices.long() if conv_state_indices is not None else rows
    keep = slots != pad_slot_id
    rows, slots = rows[keep], slots[keep]

    out = torch.zeros_like(tokens)
    window = torch.cat([conv_state[slots, :, :state_len].to(tokens.dtype), tokens[rows]], dim=-1)
    out[rows] = _depthwise_conv(window, weight, bias, silu)
    conv_state[slots, :, :state_len] = window[..., -state_len:].to(conv_state.dtype)
    if intermediate_conv_window is not None:
        steps = intermediate_state_indices.long()[keep]
        for t in range(seqlen):
            intermediate_conv_window[steps, t, :, :state_len] = window[..., t + 1 : t + 1 + state_len].to(intermediate_conv_window.dtype)
    return out.squeeze(-1) if x.dim() == 2 else out


def _depthwise_conv(window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool) -> torch.Tensor:
    """(batch, dim, width - 1 + L) -> (batch, dim, L): one output per full window, in fp32."""
    y = F.conv1d(
        window.float(),
        weight.float().unsqueeze(1),
        None if bias is None else bias.float(),
        groups=weight.shape[0],
    )
    return (F.silu(y) if silu else y).to(window.dtype)


def _is_silu(activation: str | bool | None) -> bool:
    # The Triton wrappers map True to "silu" and treat "silu"/"swish" as SiLU, None as identity.
    if activation is None or activation is False:
        return False
    if activation is True or activation in ("silu", "swish"):
        return True
    raise ValueError(f"unsupported conv1d activation {activation!r}")
