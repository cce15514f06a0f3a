"""What the committed recordings hold, read from their states without the TUI: the tests
compare the panels with these."""

from __future__ import annotations

import functools

from snapshot_apps.replay_app import load

from mcinspect.schema import CacheState, NodeId, Runs, SlotId


@functools.cache
def states(name: str) -> tuple[CacheState, ...]:
    """Every frame's state of recording `name`, oldest first."""
    source = load(name)
    return tuple(source.state_at(frame.index) for frame in source.frames())


def first_double_claim(name: str = "fault") -> tuple[int, SlotId]:
    """The first frame where a slot has two owners (a cow_source claim is not an owner)."""
    for frame, state in enumerate(states(name)):
        for slot, claims in sorted(state.slots.items()):
            if sum(claim.kind != "cow_source" for claim in claims) > 1:
                return frame, slot
    raise AssertionError(f"recording {name} has no slot claimed twice")


def ancestors(state: CacheState, node: NodeId) -> list[NodeId]:
    """`node`, its parent, ... up to the root."""
    path = []
    while node in state.nodes:
        path.append(node)
        node = state.nodes[node].parent
    return path


def pages(runs: Runs, page_size: int) -> list[int]:
    """The KV pages token runs touch, sorted."""
    return sorted({page for start, length in runs for page in range(start // page_size, (start + length - 1) // page_size + 1)})
