"""Colours and classes of the Graphviz render, and the legend that explains them.

One state decides a box's fill (first match wins in NODE_FILL's order); every state that
applies also goes into the SVG `class` attribute, so a stylesheet or a test can select on it.
"""

from __future__ import annotations

from ..schema import NodeRecord, SlotClaim

VIOLATION_BORDER = "#d00000"
FOCUS_BORDER = "#1f4fd1"

NODE_FILL: dict[str, tuple[str, str]] = {
    "violation": ("#ff9b9b", "named by a violation"),
    "tombstone": ("#d9d9d9", "tombstone: mamba state evicted, KV kept"),
    "locked": ("#ffc870", "locked (full or mamba lock held)"),
    "evictable": ("#b7e4c7", "evictable"),
    "mamba": ("#a9d6f5", "holds mamba state (not evictable)"),
    "plain": ("#ffffff", "no mamba state (split parent)"),
}
"""Node state -> (fill colour, legend text), in precedence order."""

SLOT_FILL: dict[str, tuple[str, str]] = {
    "tree": ("#a9d6f5", "slot owned by a tree node"),
    "working": ("#ffe08a", "request's working slot"),
    "ping_pong0": ("#d7b8f3", "ping-pong slot 0"),
    "ping_pong1": ("#b48ce0", "ping-pong slot 1"),
    "cow_source": ("#8fd3c7", "copy-on-write source"),
    "admission": ("#e6e6e6", "held during admission"),
    "free": ("#ffffff", "free"),
    "unaccounted": ("#ff9b9b", "unaccounted (no owner)"),
    "shared": ("#ff6b6b", "claimed more than once"),
}
"""Slot colour key -> (fill colour, legend text)."""

FOLD_FILL = "#f2f2f2"
REQUEST_FILL = "#fff4d6"


def node_classes(record: NodeRecord, flagged: bool) -> list[str]:
    """Every state of NODE_FILL that applies to `record`, in precedence order (never empty)."""
    classes = []
    if flagged:
        classes.append("violation")
    if record.tombstone:
        classes.append("tombstone")
    if record.full_lock or record.mamba_lock:
        classes.append("locked")
    if record.evictable:
        classes.append("evictable")
    if record.mamba_slot != -1:
        classes.append("mamba")
    return classes or ["plain"]


def slot_key(claims: list[SlotClaim]) -> str:
    """The SLOT_FILL key of a slot with these claims."""
    if len(claims) > 1:
        return "shared"
    if not claims:
        return "unaccounted"
    claim = claims[0]
    if claim.kind == "ping_pong":
        return "ping_pong1" if claim.ping_pong_index == 1 else "ping_pong0"
    return claim.kind


def legend_label(folded: bool) -> str:
    """An HTML-like label: one swatch per colour, then the shapes."""
    rows = ['<TR><TD COLSPAN="2"><B>legend</B></TD></TR>', '<TR><TD COLSPAN="2" ALIGN="LEFT"><I>tree nodes</I></TD></TR>']
    rows += [_swatch(colour, text) for colour, text in NODE_FILL.values()]
    rows.append(f'<TR><TD BORDER="3" COLOR="{VIOLATION_BORDER}"> </TD><TD ALIGN="LEFT">red border: violation</TD></TR>')
    rows.append(f'<TR><TD BORDER="3" COLOR="{FOCUS_BORDER}"> </TD><TD ALIGN="LEFT">blue border: focus</TD></TR>')
    rows.append('<TR><TD COLSPAN="2" ALIGN="LEFT"><I>mamba slots</I></TD></TR>')
    rows += [_swatch(colour, text) for colour, text in SLOT_FILL.values()]
    rows.append(_swatch(REQUEST_FILL, "request (edges to its slots and last node)"))
    if folded:
        rows.append(_swatch(FOLD_FILL, "folded: +nodes / tokens below, or a chain"))
    return '<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="3">' + "".join(rows) + "</TABLE>>"


def _swatch(colour: str, text: str) -> str:
    return f'<TR><TD BGCOLOR="{colour}" WIDTH="18"> </TD><TD ALIGN="LEFT">{text}</TD></TR>'
