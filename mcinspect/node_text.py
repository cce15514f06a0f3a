"""One radix tree node as a line of rich Text, shared by the TUI's tree rows and
`mcinspect snapshot --format tree` (so that this module imports rich, never Textual)."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from .schema import NodeRecord

TOKEN_PREVIEW = 6
"""Token ids shown per node."""

_ID = Style(bold=True)
_DIM = Style(color="grey50")


def node_text(node: NodeRecord, id_style: Style | None = None) -> Text:
    """`#12 [0..64) S5 L1/1 evictable  151644 872 …`: id, token range, mamba slot, lock refs
    full/mamba, states, then a token preview; `id_style` is added to the id's colour."""
    text = Text(no_wrap=True, overflow="crop")
    style = _ID + Style(color=node_colour(node))
    text.append(f"#{node.id}", style=style + id_style if id_style is not None else style)
    text.append(f" [{node.depth}..{node.depth + node.key_len})", style=_DIM)
    if node.mamba_slot >= 0:
        text.append(" ")
        text.append(f"S{node.mamba_slot}", style="bold white on dodger_blue3")
    if node.full_lock or node.mamba_lock:
        text.append(f" L{node.full_lock}/{node.mamba_lock}", style="bold yellow")
    if node.evictable:
        text.append(" evictable", style="cyan")
    if node.tombstone:
        text.append(" tombstone", style="magenta")
    if node.kv_evicted:
        text.append(" kv-evicted", style="red")
    # Tokens last: the badges above must survive a narrow pane's crop.
    tokens = node.token_ids[:TOKEN_PREVIEW]
    preview = " ".join(map(str, tokens)) + (" …" if node.key_len > len(tokens) else "")
    text.append(f"  {preview}", style="grey62")
    return text


def node_colour(node: NodeRecord) -> str:
    if node.tombstone or node.kv_evicted:
        return "grey50"
    if node.full_lock or node.mamba_lock:
        return "yellow"
    if node.mamba_slot >= 0:
        return "green3"
    return "white"
