"""What changed in the cache between two states: nodes added, evicted, split or tombstoned,
slots that changed owner, fingerprints that changed, locks taken or released, requests that came
and went. `diff_states` for two states, `diff_recording` for two steps of a recording;
`format_diff` for people, `diff_json` (msgspec) for tools.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .recording import RecordingReader
from .schema import CacheState, NodeId, Rid, SlotClaim, SlotId, Step

IDS_IN_TEXT = 20
"""Ids listed per line of `format_diff` (the JSON lists them all)."""


class Owner(msgspec.Struct, frozen=True, order=True):
    """Who a slot claim says holds the slot; what the claim says beyond that (seqlen,
    last-tracked flag) is not ownership."""

    kind: str
    node: NodeId = NodeId(-1)
    rid: Rid = Rid("")
    ping_pong_index: int = -1

    @classmethod
    def of(cls, claim: SlotClaim) -> Owner:
        return cls(claim.kind, claim.node, claim.rid, claim.ping_pong_index)

    def __str__(self) -> str:
        if self.kind == "tree":
            return f"tree #{self.node}"
        if self.kind == "ping_pong":
            return f"pp{self.ping_pong_index} {self.rid}"
        return f"{self.kind} {self.rid}".strip()


class NodeSplit(msgspec.Struct, frozen=True):
    """`node` kept its id but its key got shorter and it hangs under a new parent (sglang's
    `_split_node` inserts the new parent above it)."""

    node: NodeId
    old_parent: NodeId
    new_parent: NodeId
    old_key_len: int
    new_key_len: int


class SlotChange(msgspec.Struct, frozen=True):
    slot: SlotId
    before: list[Owner]
    after: list[Owner]
    """Empty when the slot is not in the state (pool resized)."""


class FingerprintChange(msgspec.Struct, frozen=True):
    slot: SlotId
    before: int | None
    """None: no fingerprint in the first state."""
    after: int | None
    step_before: Step | None
    step_after: Step | None


class LockChange(msgspec.Struct, frozen=True):
    node: NodeId
    full_lock: tuple[int, int]
    """(before, after)."""
    mamba_lock: tuple[int, int]


class StateDiff(msgspec.Struct, frozen=True):
    """Everything that changed from step `from_step` to step `to_step`; lists sorted by id."""

    from_step: Step
    to_step: Step
    nodes_added: list[NodeId]
    nodes_evicted: list[NodeId]
    """In the first state, gone from the second."""
    nodes_split: list[NodeSplit]
    nodes_tombstoned: list[NodeId]
    """Kept their KV but lost their mamba state."""
    slot_owner_changes: list[SlotChange]
    fingerprint_changes: list[FingerprintChange]
    lock_changes: list[LockChange]
    requests_added: list[Rid]
    requests_removed: list[Rid]

    @property
    def empty(self) -> bool:
        return not any(
            (
                self.nodes_added,
                self.nodes_evicted,
                self.nodes_split,
                self.nodes_tombstoned,
                self.slot_owner_changes,
                self.fingerprint_changes,
                self.lock_changes,
                self.requests_added,
                self.requests_removed,
            )
        )


def diff_states(a: CacheState, b: CacheState) -> StateDiff:
    """What changed from `a` to `b` (see StateDiff). Cost: one pass over both states."""
    splits, tombstoned, locks = [], [], []
    for node_id, old in a.nodes.items():
        new = b.nodes.get(node_id)
        if new is None or new is old:  # records are immutable: the same object did not change
            continue
        if new.key_len < old.key_len and new.parent != old.parent:
            splits.append(NodeSplit(node_id, old.parent, new.parent, old.key_len, new.key_len))
        if new.tombstone and not old.tombstone:
            tombstoned.append(node_id)
        if (new.full_lock, new.mamba_lock) != (old.full_lock, old.mamba_lock):
            locks.append(LockChange(node_id, (old.full_lock, new.full_lock), (old.mamba_lock, new.mamba_lock)))
    slot_changes = []
    for slot in sorted(a.slots.keys() | b.slots.keys()):
        before, after = a.slots.get(slot), b.slots.get(slot)
        if before is after:
            continue
        owners_before = sorted(Owner.of(c) for c in before or [])
        owners_after = sorted(Owner.of(c) for c in after or [])
        if owners_before != owners_after:
            slot_changes.append(SlotChange(slot, owners_before, owners_after))
    prints = []
    for slot in sorted(a.contents.keys() | b.contents.keys()):
        old_content, new_content = a.contents.get(slot), b.contents.get(slot)
        old_print = old_content.fingerprint if old_content is not None else None
        new_print = new_content.fingerprint if new_content is not None else None
        if old_print != new_print:
            prints.append(
                FingerprintChange(
                    slot,
                    old_print,
                    new_print,
                    old_content.step if old_content is not None else None,
                    new_content.step if new_content is not None else None,
                )
            )
    return StateDiff(
        from_step=a.step,
        to_step=b.step,
        nodes_added=sorted(b.nodes.keys() - a.nodes.keys()),
        nodes_evicted=sorted(a.nodes.keys() - b.nodes.keys()),
        nodes_split=sorted(splits, key=lambda s: s.node),
        nodes_tombstoned=sorted(tombstoned),
        slot_owner_changes=slot_changes,
        fingerprint_changes=prints,
        lock_changes=sorted(locks, key=lambda c: c.node),
        requests_added=sorted(b.requests.keys() - a.requests.keys()),
        requests_removed=sorted(a.requests.keys() - b.requests.keys()),
    )


def diff_recording(reader: RecordingReader, from_step: Step, to_step: Step) -> StateDiff:
    """`diff_states` of a recording's states at two steps (one pass over the file). Raises
    StepNotRecorded."""
    a, b = reader.states_at([from_step, to_step])
    return diff_states(a, b)


def diff_json(diff: StateDiff) -> bytes:
    return msgspec.json.encode(diff)


def format_diff(diff: StateDiff) -> str:
    """A few lines for a terminal or a bug report."""
    if diff.empty:
        return f"no changes from step {diff.from_step} to step {diff.to_step}"
    lines = [f"changes from step {diff.from_step} to step {diff.to_step}:"]

    def section(title: str, items: list[str], inline: bool) -> None:
        if not items:
            return
        more = f" +{len(items) - IDS_IN_TEXT} more" if len(items) > IDS_IN_TEXT else ""
        if inline:
            lines.append(f"  {title} ({len(items)}): {' '.join(items[:IDS_IN_TEXT])}{more}")
        else:
            lines.append(f"  {title} ({len(items)}):")
            lines.extend(f"    {item}" for item in items[:IDS_IN_TEXT])
            if more:
                lines.append(f"   {more}")

    section("nodes added", _ids(diff.nodes_added), True)
    section("nodes evicted", _ids(diff.nodes_evicted), True)
    section(
        "nodes split",
        [f"#{s.node}: key {s.old_key_len} -> {s.new_key_len}, parent #{s.old_parent} -> #{s.new_parent}" for s in diff.nodes_split],
        False,
    )
    section("nodes tombstoned", _ids(diff.nodes_tombstoned), True)
    section("slot owners", [f"slot {c.slot}: {_owners(c.before)} -> {_owners(c.after)}" for c in diff.slot_owner_changes], False)
    section("fingerprints", [f"slot {c.slot}: {_print(c.before)} -> {_print(c.after)}" for c in diff.fingerprint_changes], False)
    section(
        "locks",
        [f"#{c.node}: full {c.full_lock[0]} -> {c.full_lock[1]}, mamba {c.mamba_lock[0]} -> {c.mamba_lock[1]}" for c in diff.lock_changes],
        False,
    )
    section("requests added", list(diff.requests_added), True)
    section("requests removed", list(diff.requests_removed), True)
    return "\n".join(lines)


def _ids(nodes: Iterable[NodeId]) -> list[str]:
    return [f"#{n}" for n in nodes]


def _owners(owners: list[Owner]) -> str:
    return " + ".join(map(str, owners)) if owners else "(not in pool)"


def _print(fingerprint: int | None) -> str:
    return "none" if fingerprint is None else f"{fingerprint:016x}"
