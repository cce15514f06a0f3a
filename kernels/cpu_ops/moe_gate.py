"""Sigmoid gate of the MoE shared expert (Qwen2/Qwen3-Next `shared_expert_gate`).

Torch versions of `fused_gate_sigmoid_mul` / `fused_gate_sigmoid_mul_add` from
`sglang/kernels/ops/elementwise/elementwise.py`: per token, gate = sigmoid(hidden . w)
scales the shared expert's output, all in fp32.
"""

from __future__ import annotations

import torch


def fused_gate_sigmoid_mul(hidden_states: torch.Tensor, gate_weight: torch.Tensor, shared_output: torch.Tensor) -> torch.Tensor:
    """sigmoid(hidden_states @ gate_weight) * shared_output, in shared_output's dtype.

    hidden_states, shared_output: (tokens, hidden); gate_weight: (hidden,).
    """
    return (_gate(hidden_states, gate_weight) * shared_output.float()).to(shared_output.dtype)


def fused_gate_sigmoid_mul_add(
    hidden_states: torch.Tensor,
    gate_weight: torch.Tensor,
    shared_output: torch.Tensor,
    final_hidden_states: torch.Tensor,
) -> None:
    """final_hidden_states += sigmoid(hidden_states @ gate_weight) * shared_output, in place."""
    gated = final_hidden_states.float() + _gate(hidden_states, gate_weight) * shared_output.float()
    final_hidden_states.copy_(gated)


def _gate(hidden_states: torch.Tensor, gate_weight: torch.Tensor) -> torch.Tensor:
    """(tokens, 1) fp32 gate."""
    return torch.sigmoid((hidden_states.float() * gate_weight.float()).sum(-1, keepdim=True))
