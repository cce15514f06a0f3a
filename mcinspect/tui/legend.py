"""A colour legend that wraps between entries, never inside one."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.geometry import Size

from .sized_by_layout import SizedByLayout


class Legend(SizedByLayout):
    """`██ label` entries laid out greedily over as many lines as the width needs."""

    DEFAULT_CSS = """
    Legend { height: auto; color: $text-muted; }
    """

    def __init__(self, entries: list[tuple[str, str, Style]], *, id: str | None = None) -> None:
        """`entries`: (swatch text, label, swatch style)."""
        super().__init__(id=id)
        self._entries = entries

    def _breaks(self, width: int) -> list[bool]:
        """Per entry: does it start a new line?"""
        breaks, used = [], 0
        for swatch, label, _ in self._entries:
            entry_width = len(swatch) + 1 + len(label) + 2
            breaks.append(used > 0 and used + entry_width > width)
            used = entry_width if breaks[-1] else used + entry_width
        return breaks

    def render(self) -> Text:
        text = Text(no_wrap=True)
        for (swatch, label, style), new_line in zip(self._entries, self._breaks(max(1, self.size.width)), strict=True):
            if new_line:
                text.append("\n")
            text.append(swatch, style=style)
            text.append(f" {label}  ")
        return text

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1 + sum(self._breaks(width))
