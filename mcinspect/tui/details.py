"""The detail pane: what is selected, and its text for a node, slot, request or page (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.text import Text

from ..checks.recompute import beyond, forward_of, is_verified, tolerance_text
from ..schema import NodeId, Rid, SlotClaim, SlotContent, SlotId
from .findings import Findings, SlotChange
from .model import FrameView, PageId
from .palette import PAGE_LABELS, SLOT_LABELS, SLOT_STYLES

if TYPE_CHECKING:
    from ..verify_command import Judged

_KEY = "bold grey70"


@dataclass(frozen=True)
class Selection:
    """What the detail pane describes."""

    kind: Literal["none", "node", "slot", "request", "page", "rank"]
    value: int | str = -1
    full: bool = False
    """Include what costs a scan of the tree (a page's holders): asked for with enter."""


def detail_text(view: FrameView | None, sel: Selection, findings: Findings, verdicts: Mapping[NodeId, list[Judged]] | None = None) -> Text:
    """The detail pane for `sel` at `view`'s step; `verdicts`: what `V` (verify) answered, by node."""
    if view is None or sel.kind == "none":
        return Text("Select a node, slot, request or page to see it here. ? shows the keys.")
    if sel.kind == "node":
        node = NodeId(int(sel.value))
        return node_details(view, node, (verdicts or {}).get(node, []))
    if sel.kind == "slot":
        slot = SlotId(int(sel.value))
        return slot_details(view, slot, findings.slot_history(slot, view.frame))
    if sel.kind == "request":
        return request_details(view, Rid(str(sel.value)))
    if int(sel.value) < view.page_count:
        return page_details(view, PageId(int(sel.value)), holders=sel.full)
    return Text(f"page {sel.value} is not in step {view.state.step}", style="italic")


def _field(text: Text, name: str, value: object, style: str = "") -> None:
    text.append(f"{name} ", style=_KEY)
    text.append(f"{value}  ", style=style)


def claim_text(claim: SlotClaim) -> str:
    """`ping_pong[1] rid=r3 last-tracked seqlen=64` and the like."""
    parts = [claim.kind if claim.ping_pong_index < 0 else f"{claim.kind}[{claim.ping_pong_index}]"]
    if claim.node >= 0:
        parts.append(f"node=#{claim.node}")
    if claim.rid:
        parts.append(f"rid={claim.rid}")
    if claim.last_tracked:
        parts.append("last-tracked")
    if claim.seqlen >= 0:
        parts.append(f"seqlen={claim.seqlen}")
    return " ".join(parts)


def node_details(view: FrameView, node_id: NodeId, verdicts: list[Judged] = ()) -> Text:
    node = view.state.nodes.get(node_id)
    if node is None:
        return Text(f"node #{node_id} is not in step {view.state.step}", style="italic")
    text = Text()
    text.append(f"node #{node.id}", style="bold")
    text.append(f"  parent #{node.parent}  tokens [{node.depth}..{node.depth + node.key_len})\n")
    _field(text, "mamba slot", node.mamba_slot if node.mamba_slot >= 0 else "none")
    _field(text, "locks full/mamba", f"{node.full_lock}/{node.mamba_lock}")
    _field(text, "evictable", node.evictable)
    _field(text, "tombstone", node.tombstone)
    _field(text, "hits", node.hit_count)
    text.append("\n")
    _field(text, "lru full/mamba", f"{node.in_full_lru}/{node.in_mamba_lru}")
    _field(text, "kv", "evicted" if node.kv_evicted else f"{sum(n for _, n in node.kv_runs)} tokens in {len(node.kv_runs)} runs")
    _field(text, "children", len(view.children.get(node.id, ())))
    text.append("\n")
    tokens = node.token_ids
    suffix = f" … ({node.key_len - len(tokens)} more)" if node.key_len > len(tokens) else ""
    _field(text, "key", " ".join(map(str, tokens)) + suffix, "grey62")
    content = view.state.contents.get(node.mamba_slot) if node.mamba_slot >= 0 else None
    if content is not None:
        _recompute(text, content)
    for judged in verdicts:
        _verdict(text, judged)
    _violations(text, [v.reason for v in view.violations if node.id in v.violation.nodes])
    return text


def _recompute(text: Text, content: SlotContent) -> None:
    """The engine's automatic T2 result for the slot's state, where it has one."""
    if not is_verified(content):
        return
    oracle = content.recompute_oracle or "transformers"
    equal = beyond(oracle, forward_of(content), content.recompute_conv_rel_l2, content.recompute_temporal_rel_l2) is None
    text.append("\nT2 ", style=_KEY)
    text.append("equal" if equal else "MISMATCH", style="green" if equal else "bold red")
    text.append(
        f"  {oracle} oracle at step {content.step}: conv {content.recompute_conv_rel_l2:.3g}, temporal {content.recompute_temporal_rel_l2:.3g} (tolerance {tolerance_text(oracle, forward_of(content))})"
    )


def _verdict(text: Text, judged: Judged) -> None:
    """What `V` answered for the node."""
    v = judged.verdict
    text.append("\nverified now ", style=_KEY)
    if judged.equal is None:
        text.append(f"not verified: {v.error}", style="yellow")
        return
    text.append("equal" if judged.equal else "MISMATCH", style="green" if judged.equal else "bold red")
    text.append(
        f"  {v.oracle} oracle, {v.tokens} tokens: conv {v.conv_rel_l2:.3g}, temporal {v.temporal_rel_l2:.3g} (tolerance {tolerance_text(v.oracle, v.forward)})"
    )


def slot_details(view: FrameView, slot: SlotId, history: list[SlotChange]) -> Text:
    claims = view.state.slots.get(slot)
    if claims is None:
        return Text(f"slot {slot} is not in step {view.state.step}", style="italic")
    owner = view.owner_of(slot)
    text = Text()
    text.append(f"slot {slot}", style="bold")
    text.append("  ")
    text.append(f" {SLOT_LABELS[owner]} ", style=SLOT_STYLES[owner])
    text.append("\n")
    for claim in claims:
        text.append(f"  claim: {claim_text(claim)}\n")
    content = view.state.contents.get(slot)
    if content is not None:
        _field(text, "fingerprint", f"{content.fingerprint:016x}")
        _field(text, "at step", content.step)
        if content.zero:
            text.append("zero  ", style="cyan")
        if content.nonfinite:
            text.append(f"{content.nonfinite} NaN/Inf", style="bold red")
        text.append("\n")
    _violations(text, [v.reason for v in view.violations if slot in v.violation.slots])
    if history:
        text.append("history (oldest first)\n", style=_KEY)
        for change in history:
            held = ", ".join(claim_text(c) for c in change.claims) or "no claims"
            text.append(f"  step {change.step:>6}  {held}")
            if change.content is not None:
                text.append(f"  fp {change.content.fingerprint:016x}", style="grey62")
            text.append("\n")
    return text


def request_details(view: FrameView, rid: Rid) -> Text:
    req = view.state.requests.get(rid)
    if req is None:
        return Text(f"request {rid} is not in step {view.state.step}", style="italic")
    text = Text()
    text.append(f"request {req.rid}", style="bold")
    text.append(f"  {req.state}  row {req.row}\n")
    _field(text, "prompt/output", f"{req.prompt_len}/{req.output_len}")
    _field(text, "prefix", req.prefix_len)
    _field(text, "protected", req.cache_protected_len)
    _field(text, "committed", req.committed_len)
    _field(text, "allocated", req.allocated_len)
    text.append("\n")
    _field(text, "last node", f"#{req.last_node}")
    _field(text, "working slot", req.working_slot)
    _field(text, "COW source", req.cow_source if req.cow_source >= 0 else "none")
    _field(text, "needs clear", req.needs_clear)
    text.append("\n")
    _field(text, "ping-pong", ping_pong_text(view, rid))
    _field(text, "next/last idx", f"{req.next_track_idx}/{req.last_track_idx}")
    _field(text, "seqlen last/prev", f"{req.last_track_seqlen}/{req.prev_track_seqlen}")
    _violations(text, [v.reason for v in view.violations if rid in v.violation.rids])
    return text


def ping_pong_text(view: FrameView, rid: Rid) -> str:
    """`12•@64 13`: the slots, the last-tracked one marked with its seqlen, `-` for empty."""
    req = view.state.requests[rid]
    parts = []
    for index, slot in enumerate(req.ping_pong):
        empty = index < len(req.ping_pong_empty) and req.ping_pong_empty[index]
        if empty or slot < 0:
            parts.append("-")
        elif index == req.last_track_idx:
            parts.append(f"{slot}•@{req.last_track_seqlen}")
        else:
            parts.append(str(slot))
    return " ".join(parts) or "-"


def page_details(view: FrameView, page: PageId, holders: bool) -> Text:
    """A page's owner flags; with `holders`, the nodes and requests holding it (a scan)."""
    flags = view.page_owners[page]
    first = page * view.page_size
    text = Text()
    text.append(f"page {page}", style="bold")
    label = PAGE_LABELS.get(flags, "free and held (conflict)")
    text.append(f"  tokens [{first}..{first + view.page_size})  {label}\n")
    if not holders:
        text.append("enter lists the nodes and requests holding it", style="italic grey62")
        return text
    nodes, rids = view.page_holders(page)
    _field(text, "nodes", " ".join(f"#{n.id}" for n in nodes[:20]) or "none")
    text.append("\n")
    _field(text, "requests", " ".join(rids[:20]) or "none")
    return text


def _violations(text: Text, reasons: list[str]) -> None:
    for reason in reasons:
        text.append("! ", style="bold bright_white on red")
        text.append(f" {reason}\n", style="red")
