"""Faults in who owns a mamba slot: leaked, owned twice, written while cached, ghost COW source.

Each function here is a hook body for sglang's HookRegistry (see `base.Hook`); parameter
names match the sglang method they wrap, since sglang passes some arguments by keyword.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...req_kv import kv_of
from .base import EXTRA_BUFFER_STRATEGIES, REQ_TO_TOKEN_POOL, Fault, Hook, component_hook, extra_buffer, log_faulty_action

if TYPE_CHECKING:
    import torch

LEAK_LIMIT = 3
"""Slots leak-slot withholds before it stops: one is enough to detect, and a pool of 32 slots
that keeps leaking would stall the demo's scheduler instead of showing the bug."""

_leaked: list[int] = []

LENIENT_IDLE_CHECK = (("SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE", "0"),)
"""sglang's own slot census (SchedulerInvariantChecker, strict by default) stops the scheduler
at the first idle moment once slots leak or are freed twice. Lenient, it logs a warning and the
engine keeps serving, so mcinspect can show the fault at the step it happened."""


class _FreeAllBut:
    """Stands in for the mamba allocator during one call: frees everything except `slot`."""

    def __init__(self, allocator: Any, slot: int) -> None:
        self.allocator = allocator
        self.slot = slot

    def free(self, free_index: torch.Tensor) -> None:
        self.allocator.free(free_index[free_index != self.slot])


def leak_working_slot(original: Callable[..., Any], pool: Any, req: Any, mamba_ping_pong_track_buffer_to_keep: int | None = None) -> Any:
    """Around `HybridReqToTokenPool.free_mamba_cache`: the request's working slot is never freed.

    Ping-pong slots are freed as usual; the working slot stays out of the free list with no
    owner (the request forgets it in the same call).
    """
    if len(_leaked) >= LEAK_LIMIT:
        return original(pool, req, mamba_ping_pong_track_buffer_to_keep)
    slot = int(kv_of(req).mamba_pool_idx)
    # 0.5.12 has no slot allocator: free_mamba_cache frees through the MambaPool itself
    freer = "mamba_allocator" if hasattr(pool, "mamba_allocator") else "mamba_pool"
    allocator = getattr(pool, freer)
    setattr(pool, freer, _FreeAllBut(allocator, slot))
    try:
        return original(pool, req, mamba_ping_pong_track_buffer_to_keep)
    finally:
        setattr(pool, freer, allocator)
        _leaked.append(slot)
        log_faulty_action("leak-slot", slot=slot, rid=req.rid)


def keep_donated_slot(original: Callable[..., Any], pool: Any, req: Any, new_slot: torch.Tensor) -> torch.Tensor:
    """Around `donate_mamba_ping_pong_slot`: the donated slot stays in the request's ping-pong.

    The tree takes the slot while the request keeps tracking into it (its entry and the
    device mirror are put back); the fresh replacement slot goes back to the free list.
    """
    donated = original(pool, req, new_slot)
    pool.set_mamba_ping_pong_slot(req, pool.get_mamba_ping_pong_keep_idx(req), donated[0])
    pool.mamba_allocator.free(new_slot)
    log_faulty_action("double-owner", slot=int(donated[0]), rid=req.rid)
    return donated


def keep_stale_track_mirror(original: Callable[..., Any], pool: Any, req: Any, new_slot: torch.Tensor) -> torch.Tensor:
    """Around `donate_mamba_ping_pong_slot`: the device mirror keeps the donated slot.

    `req.kv` names the fresh slot, but track destinations are gathered from the device
    mirror, so the request's next track write at that ping-pong position lands in the
    slot the tree now owns.
    """
    mirror = pool.req_index_to_mamba_ping_pong_track_buffer_mapping
    row = kv_of(req).req_pool_idx
    stale = mirror[row].clone()
    donated = original(pool, req, new_slot)
    mirror[row] = stale
    log_faulty_action("overwrite-cached", slot=int(donated[0]), rid=req.rid)
    return donated


def stamp_ghost_root(
    original: Callable[..., Any],
    component: Any,
    req: Any,
    is_finished: bool,
    insert_result: Any = None,
    insert_params: Any = None,
) -> Any:
    """Around `MambaComponent.cleanup_after_caching_req`: a zero-length cache gets a ghost.

    When a finished request has nothing to cache (cache_len 0: every request whose tracked
    state was already donated right after its prefill), checkpoint_into_tree skips the
    insert. The fault inserts anyway with an empty key: in the unified tree the depth-0
    node is the root, so the request's keep slot, never written for it, becomes the root's
    mamba value, and every later request without a longer hit copies it on write. Each
    such finish replaces the ghost, so it soon holds a recycled slot's stale state.
    """
    value = None if insert_params is None else insert_params.mamba_value
    # Nothing cached: 0.5.21+ skip the insert (no result); 0.5.19-0.5.20 insert the empty key
    # (a result naming the root, with mamba_exist set).
    cached_nothing = insert_result is None or len(insert_params.key) == 0
    if not (is_finished and cached_nothing and value is not None and extra_buffer(component)):
        return original(component, req, is_finished, insert_result=insert_result, insert_params=insert_params)
    from sglang.srt.mem_cache.base_prefix_cache import InsertResult

    root = component.tree_core.root_node
    data = root.component_data[component.component_type]
    if data.value is None:
        component.tree_core.set_component_device_value(root.id, component.component_type, value)
    else:  # same node, same LRU entry and ledger: only the slot changes hands
        component.cache.req_to_token_pool.mamba_allocator.free(data.value)
        data.value = value
    inserted = InsertResult(prefix_len=0, last_device_node=root.id, mamba_exist=False)
    log_faulty_action("ghost-node", slot=int(value), node=root.id, rid=req.rid)
    return original(component, req, is_finished, insert_result=inserted, insert_params=insert_params)


LEAK_SLOT = Fault(
    name="leak-slot",
    upstream="mcinspect (slot census; cf. SchedulerInvariantChecker's mamba pool check)",
    description=(
        f"free_mamba_cache forgets the request's working slot at finish: the slot is neither "
        f"free nor owned (the first {LEAK_LIMIT} finished requests)."
    ),
    expected_checks=("slot-partition",),
    # no_buffer donates the working slot at finish and calls free_mamba_cache only when the
    # tree already holds that state: the leak would almost never happen there.
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{REQ_TO_TOKEN_POOL}.free_mamba_cache", "around", leak_working_slot),),
    trigger="the first finished requests (from the first wave on)",
    environment=LENIENT_IDLE_CHECK,
)

DOUBLE_OWNER = Fault(
    name="double-owner",
    upstream="mcinspect (donation bookkeeping; cf. #24954 extra_buffer races)",
    description=(
        "donate_mamba_ping_pong_slot gives the tracked slot to the tree but leaves it in the "
        "request's ping-pong buffer: the slot has two owners and the request's next track "
        "write overwrites the cached state."
    ),
    expected_checks=("slot-partition", "ping-pong-safety", "content-immutable"),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{REQ_TO_TOKEN_POOL}.donate_mamba_ping_pong_slot", "around", keep_donated_slot),),
    trigger="every donation of a tracked state (right after each tracked prefill)",
    environment=LENIENT_IDLE_CHECK,
)

OVERWRITE_CACHED = Fault(
    name="overwrite-cached",
    upstream="sgl-project/sglang#24221",
    description=(
        "After donation the device ping-pong mirror still names the donated slot while the "
        "request's own record names the fresh one: the request's next track write at that "
        "position lands in the slot the tree owns, and its finish frees it (the mirror is what "
        "free_mamba_cache frees), leaking the fresh slot."
    ),
    expected_checks=("request-slots", "slot-partition", "content-immutable"),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(Hook(f"{REQ_TO_TOKEN_POOL}.donate_mamba_ping_pong_slot", "around", keep_stale_track_mirror),),
    trigger="any donating request's finish (frees the cached slot); a request that tracks again at "
    "the position of an earlier donation (third chunk of a chunked prompt) overwrites it",
    environment=LENIENT_IDLE_CHECK,
)

GHOST_NODE = Fault(
    name="ghost-node",
    upstream="sgl-project/sglang#35821 (#30451)",
    description=(
        "A finished request with nothing to cache still inserts its state under an empty key; "
        "the empty-key node (the root, in the unified tree) then serves as a stale copy-on-write "
        "source for every request without a longer hit."
    ),
    expected_checks=("content-immutable", "cow-source", "tree-shape"),
    strategies=EXTRA_BUFFER_STRATEGIES,
    hooks=(component_hook("cleanup_after_caching_req", "around", stamp_ghost_root),),
    trigger="the first finished request: its tracked state was already donated after prefill, so nothing is left to cache at finish",
)

FAULTS: tuple[Fault, ...] = (LEAK_SLOT, DOUBLE_OWNER, OVERWRITE_CACHED, GHOST_NODE)
