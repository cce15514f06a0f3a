"""EventSink's step-boundary conversion of deferred slot ids into plain ints."""

from __future__ import annotations

import msgspec
import torch

from mcinspect.schema import EvictEvent, NodeId, SlotEvent, SlotId, Step
from mcinspect_engine_hooks.event_sink import DeferredSlots, EventSink


def test_a_step_whose_only_event_defers_no_tensor_still_converts_it() -> None:
    """An eviction of nodes that held no mamba slot defers an empty list: the event must come
    out with plain (empty) slots, or its delta cannot be encoded and is lost."""
    sink = EventSink()
    sink.emit(EvictEvent, nodes=[NodeId(3)], slots=DeferredSlots([]), tokens=16)
    (event,) = sink.drain(Step(7))
    assert event == EvictEvent(step=Step(7), nodes=[NodeId(3)], slots=[], tokens=16)
    msgspec.msgpack.encode(event)


def test_deferred_slots_become_slot_ids_in_order() -> None:
    sink = EventSink()
    sink.emit(SlotEvent, slots=DeferredSlots([torch.tensor([4, 5]), None, torch.tensor(9)]), allocated=False)
    sink.emit(EvictEvent, nodes=[], slots=DeferredSlots([torch.tensor([2])]), tokens=0)
    slot_event, evict_event = sink.drain(Step(1))
    assert slot_event.slots == [SlotId(4), SlotId(5), SlotId(9)]
    assert evict_event.slots == [SlotId(2)]
