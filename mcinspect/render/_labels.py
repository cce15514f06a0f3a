"""Text of the Graphviz render: labels (short, ASCII), tooltips (every detail), DOT quoting.

Labels stay ASCII: Graphviz's PNG path has no metrics for other characters and warns.
"""

from __future__ import annotations

from html import escape

from ..schema import NodeRecord, RequestRecord, Runs, SlotClaim, SlotContent
from ._fold import Totals

RANGES_IN_LABEL = 2
IDS_IN_TOOLTIP = 50


def quote(text: str) -> str:
    """A DOT double-quoted string whose escString sequences are only the `\\n` we put in."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def html(text: str) -> str:
    """Text for an HTML-like label or attribute: entities escaped, newlines as line breaks."""
    return escape(text, quote=True).replace("\n", "<BR/>")


def html_attr(text: str) -> str:
    """Text for an attribute of an HTML-like label (a cell's TOOLTIP): newlines as entities."""
    return escape(text, quote=True).replace("\n", "&#10;")


def record_label(fields: list[str]) -> str:
    """A quoted `shape=record` label of `fields`, stacked top to bottom in a left-to-right graph
    (record syntax characters escaped)."""
    escaped = []
    for text in fields:
        for char in "\\{}|<>":
            text = text.replace(char, "\\" + char)
        escaped.append(text.replace('"', '\\"').replace("\n", "\\n"))
    return '"' + "|".join(escaped) + '"'


def human(count: int) -> str:
    """41234 -> '41.2k': labels need magnitudes, tooltips carry exact figures."""
    for scale, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if abs(count) >= scale:
            return f"{count / scale:.3g}{suffix}"
    return str(count)


def page_ranges(runs: Runs, page_size: int) -> list[tuple[int, int]]:
    """KV token runs -> inclusive page ranges, consecutive pages merged."""
    size = max(page_size, 1)
    ranges: list[tuple[int, int]] = []
    for start, length in runs:
        if length <= 0:
            continue
        first, last = start // size, (start + length - 1) // size
        if ranges and first <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], last))
        else:
            ranges.append((first, last))
    return ranges


def format_ranges(ranges: list[tuple[int, int]], limit: int | None = None) -> str:
    shown = ranges if limit is None else ranges[:limit]
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in shown)
    return text + (f" +{len(ranges) - len(shown)} more" if len(shown) < len(ranges) else "")


def node_box_label(record: NodeRecord, page_size: int) -> str:
    lines = [f"#{record.id}  d{record.depth} +{record.key_len}"]
    if record.kv_evicted:
        lines.append("KV evicted")
    elif record.kv_runs:
        lines.append("pages " + format_ranges(page_ranges(record.kv_runs, page_size), RANGES_IN_LABEL))
    state = []
    if record.mamba_slot == -1:  # a held slot has its own cell beside this label
        state.append("tombstone" if record.tombstone else "no slot")
    if record.full_lock or record.mamba_lock:
        state.append(f"lock {record.full_lock}/{record.mamba_lock}")
    if state:
        lines.append("  ".join(state))
    return "\n".join(lines)


def node_tooltip(record: NodeRecord, page_size: int, content: SlotContent | None, reasons: list[str]) -> str:
    tokens = record.token_ids
    inline = "" if len(tokens) >= record.key_len else f" (first {len(tokens)} of {record.key_len})"
    lines = [
        f"node #{record.id}, parent #{record.parent}",
        f"depth {record.depth}, key {record.key_len} tokens, ends at {record.depth + record.key_len}",
        f"tokens{inline}: {' '.join(map(str, tokens))}",
        f"key hash {record.key_hash:#018x}",
        "KV: evicted" if record.kv_evicted else f"KV runs {record.kv_runs}; pages {format_ranges(page_ranges(record.kv_runs, page_size))}",
        f"mamba slot {record.mamba_slot}" + (" (tombstone)" if record.tombstone else "") + _content(content),
        f"locks: full {record.full_lock}, mamba {record.mamba_lock}; evictable {_yes(record.evictable)}",
        f"LRU: full {_yes(record.in_full_lru)}, mamba {_yes(record.in_mamba_lru)}",
        f"last access {record.last_access:.3f}, hits {record.hit_count}",
    ]
    return "\n".join(lines + [f"VIOLATION: {r}" for r in reasons])


def missing_node_tooltip(node: int, reasons: list[str]) -> str:
    return "\n".join([f"node #{node} is not in the tree at this step"] + [f"VIOLATION: {r}" for r in reasons])


def slot_label(slot: int, claims: list[SlotClaim], content: SlotContent | None) -> list[str]:
    fields = [f"slot {slot}", ", ".join(_claim(c, short=True) for c in claims) or "no claim"]
    if content is not None:
        fields.append(f"fp {content.fingerprint & 0xFFFFFFFF:08x}" + (f" NaN/Inf {content.nonfinite}" if content.nonfinite else ""))
    return fields


def slot_tooltip(slot: int, claims: list[SlotClaim], content: SlotContent | None, reasons: list[str]) -> str:
    lines = [f"mamba slot {slot}: {len(claims)} claim(s)"] + ["  " + _claim(c, short=False) for c in claims]
    if content is not None:
        lines.append(
            f"fingerprint {content.fingerprint:#018x} at step {content.step}; non-finite {content.nonfinite}; all zero {_yes(content.zero)}"
        )
    return "\n".join(lines + [f"VIOLATION: {r}" for r in reasons])


def request_label(request: RequestRecord) -> list[str]:
    rid = request.rid if len(request.rid) <= 14 else request.rid[:12] + ".."
    return [
        f"req {rid}",
        request.state,
        f"prompt {request.prompt_len}, out {request.output_len}",
        f"prefix {request.prefix_len}, committed {request.committed_len}",
    ]


def request_tooltip(request: RequestRecord, reasons: list[str]) -> str:
    lines = [
        f"request {request.rid} ({request.state}), req_to_token row {request.row}",
        f"prompt {request.prompt_len}, output {request.output_len}, prefix {request.prefix_len}",
        f"cache protected {request.cache_protected_len}, committed {request.committed_len}, allocated {request.allocated_len}",
        f"last node #{request.last_node}, working slot {request.working_slot}, cow source {request.cow_source}",
        f"ping-pong {request.ping_pong} (empty {request.ping_pong_empty}), next {request.next_track_idx}, "
        f"last tracked {request.last_track_idx} at seqlen {request.last_track_seqlen} (previous {request.prev_track_seqlen})",
        f"needs clear {_yes(request.needs_clear)}; KV runs {request.kv_runs}",
    ]
    return "\n".join(lines + [f"VIOLATION: {r}" for r in reasons])


def ping_pong_label(request: RequestRecord, index: int) -> str:
    label = f"pp{index}"
    if index == request.last_track_idx:
        label += f" LAST seqlen {request.last_track_seqlen}"
    if index == request.next_track_idx:
        label += " next"
    if index < len(request.ping_pong_empty) and request.ping_pong_empty[index]:
        label += " empty"
    return label


def fold_label(totals: Totals, chain: bool) -> str:
    head = f"+{human(totals.nodes)} nodes" + (" (chain)" if chain else "") + f" / {human(totals.tokens)} tok"
    extras = [f"{human(totals.slots)} slots"] if totals.slots else []
    extras += [f"{human(totals.locked)} locked"] if totals.locked else []
    extras += [f"{totals.flagged} violating"] if totals.flagged else []
    return head + ("\n" + ", ".join(extras) if extras else "")


def fold_tooltip(what: str, ids: list[int], totals: Totals) -> str:
    listed = " ".join(f"#{i}" for i in ids[:IDS_IN_TOOLTIP]) + (f" +{len(ids) - IDS_IN_TOOLTIP} more" if len(ids) > IDS_IN_TOOLTIP else "")
    return (
        f"{what}: {listed}\n{totals.nodes:,} nodes, {totals.tokens:,} tokens, {totals.slots:,} mamba slots, "
        f"{totals.locked:,} locked, {totals.flagged:,} named by violations"
    )


def _claim(claim: SlotClaim, short: bool) -> str:
    if claim.kind == "tree":
        owner = f"#{claim.node}"
    elif claim.kind == "free":
        owner = ""
    else:
        owner = claim.rid[:8] + ".." if short and len(claim.rid) > 10 else claim.rid
    kind = f"pp{claim.ping_pong_index}" if claim.kind == "ping_pong" else claim.kind
    text = f"{kind} {owner}".strip()
    if short:
        return text
    if claim.kind == "ping_pong" and claim.last_tracked:
        text += " (last tracked)"
    if claim.seqlen != -1:
        text += f" seqlen {claim.seqlen}"
    if claim.kind not in ("tree", "free") and claim.node != -1:
        text += f" node #{claim.node}"
    return text


def _content(content: SlotContent | None) -> str:
    if content is None:
        return ""
    return f", fingerprint {content.fingerprint:#018x} (step {content.step})"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
