"""Hook bodies of sglang 0.5.16's UnifiedRadixCache (hooks_0516.HOOKS rows "radix0516.*").

0.5.16's cache keeps its UnifiedTreeNodes itself (no UnifiedTreeCore): locks and matches take
the node, as MambaRadixCache's do (so the lock and finish bodies are events_mrc's), component
values sit in `node.component_data`, and no method names what it changes by node id (so no
dirty marks: adapter_0516 re-reads the tree at each capture). Read-only and guarded like
events.py's bodies.
"""

from __future__ import annotations

from typing import Any

from mcinspect.schema import InsertEvent, NodeId, Rid

from .components import FULL, MAMBA
from .event_sink import DeferredSlot
from .events_mrc import MrcHooks, keep_idx


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _donates(component: Any) -> bool:
    """The tree takes the request's ping-pong slot itself (extra_buffer without the int8
    checkpoint pool), the one `get_mamba_ping_pong_keep_idx` names at a finish and at a chunk
    checkpoint alike (`donate_mamba_ping_pong_slot`)."""
    return bool(component.enable_mamba_extra_buffer) and component.int8_ckpt_pool is None


class Radix0516Hooks(MrcHooks):
    """MrcHooks' lock and finish bodies, and 0.5.16's evictions and inserts."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._committed: Any = None
        """The node the latest insert gave a mamba state (its InsertResult names none)."""

    # --- every step ---

    def component_evicting(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `_evict_component_and_detach_lru(node, comp, target)`: the one place a device
        value leaves a node (leaf eviction, tombstoning, the cascade up a childless chain)."""
        node, comp = _arg(args, kwargs, 0, "node"), _arg(args, kwargs, 1, "comp")
        target = _arg(args, kwargs, 2, "target")
        if target is not None and type(target).DEVICE not in target:
            return  # host layer only (HiCache): nothing leaves the device
        value = node.component_data[comp.component_type].value
        if value is None:  # sglang calls it for every component of an evicted leaf
            return
        self.sink.evicting(node.id)
        if comp.component_type == MAMBA:
            self.sink.tombstones.add(node.id)  # dropped again if the node leaves the tree
            self.sink.evicted_values([value], 0)
        elif comp.component_type == FULL:
            self.sink.evicted_values([], len(value))

    def leaf_removing(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        """Before `_remove_leaf_from_parent(node)`: an evicted leaf leaves the tree."""
        node = _arg(args, kwargs, 0, "node")
        self.sink.evicting(node.id)
        self.sink.tombstones.discard(node.id)

    def committed(self, ret: Any, component: Any, /, *args: Any, **kwargs: Any) -> None:
        """After MambaComponent.commit_insert_component_data(node, ...): where the state went."""
        self._committed = _arg(args, kwargs, 0, "node")

    # --- a state entered the tree: before MambaComponent.cleanup_after_caching_req ---

    def _inserted(self, component: Any, args: tuple, kwargs: dict) -> tuple[Any, Any, Any] | None:
        """(request, insert params, node) when the insert just gave a node a new state."""
        req, result, params = _arg(args, kwargs, 0, "req"), _arg(args, kwargs, 2, "insert_result"), _arg(args, kwargs, 3, "insert_params")
        if result is None or result.mamba_exist or params is None or params.mamba_value is None or params.key is None:
            return None
        node = self._committed
        if node is None or node.component_data[MAMBA].value is not params.mamba_value:
            return None  # not this insert's node: no event rather than a wrong one
        return req, params, node

    def inserting(self, component: Any, /, *args: Any, **kwargs: Any) -> None:
        """InsertEvent (observed steps)."""
        found = self._inserted(component, args, kwargs)
        if found is None:
            return
        req, params, node = found
        index = keep_idx(component.cache.req_to_token_pool, req) if _donates(component) else -1
        self.sink.emit(
            InsertEvent,
            rid=Rid(req.rid),
            node=NodeId(node.id),
            slot=DeferredSlot(params.mamba_value),
            seqlen=len(params.key),
            ping_pong_index=index,
        )

    def state_inserting(self, component: Any, /, *args: Any, **kwargs: Any) -> None:
        """T2 (every step): the state's slot, node and prefix tokens for the StateLog."""
        found = self._inserted(component, args, kwargs)
        if found is None:
            return
        req, params, node = found
        finished = bool(_arg(args, kwargs, 1, "is_finished"))
        self.log.inserted(params.mamba_value, node.id, params.key, Rid(req.rid), _donates(component), finished)

    # --- locks: a streaming session's virtual node is not a tree node ---

    def locked(self, ret: Any, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        if hasattr(_arg(args, kwargs, 0, "node"), "component_data"):
            super().locked(ret, cache, *args, **kwargs)

    def unlocking(self, cache: Any, /, *args: Any, **kwargs: Any) -> None:
        if hasattr(_arg(args, kwargs, 0, "node"), "component_data"):
            super().unlocking(cache, *args, **kwargs)
