"""What code outside the plugin may add to it, through this module only (it imports nothing of
the plugin, so neither side imports the other):

- `register_oracle(name, factory)`: a further T2 oracle. The embedded CPU engine registers
  "transformers" (an independent implementation of its tiny model); production engines have
  the engine oracle alone, which needs no registration.
- `current_step()`: the step of the next capture in this process, for the fault library's
  log of faulty actions (None before the inspector starts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch


class StateOracle(Protocol):
    """Computes the mamba state of token prefixes in the pool's own layout."""

    def references(self, prefixes: Sequence[Sequence[int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(one tensor per pool conv tensor, each [num_mamba_layers, n, ...]; temporal
        [num_mamba_layers, n, ...]): entry i is the state after prefix i run alone."""
        ...


OracleFactory = Callable[[Any], StateOracle]
"""Builds an oracle for one scheduler (called on first use, on the scheduler thread)."""

_oracles: dict[str, OracleFactory] = {}
_step: Callable[[], int] | None = None


def register_oracle(name: str, factory: OracleFactory) -> None:
    """Make oracle `name` available to MCINSPECT_VERIFY in this process."""
    _oracles[name] = factory


def oracle_factory(name: str) -> OracleFactory | None:
    return _oracles.get(name)


def set_step_source(source: Callable[[], int] | None) -> None:
    """The inspector tells the world which step its next capture will be."""
    global _step
    _step = source


def current_step() -> int | None:
    """The step of the next capture in this process; None without an inspector."""
    return _step() if _step is not None else None
