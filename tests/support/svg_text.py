"""Does every label of a Graphviz SVG fit its box, with the fonts a Linux desktop has?

Each `<text>` is measured with the DejaVu font a Linux desktop substitutes for its font family
(fontconfig: sans-serif -> DejaVu Sans, monospace -> DejaVu Sans Mono) and compared with the
shapes of its node (or cluster) group."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
_FACES = {
    ("sans", False): "DejaVuSans.ttf",
    ("sans", True): "DejaVuSans-Bold.ttf",
    ("mono", False): "DejaVuSansMono.ttf",
    ("mono", True): "DejaVuSansMono-Bold.ttf",
}
_GROUP = re.compile(r'<g id="([^"]+)" class="(node|cluster)">(.*?)</g>', re.S)
_TEXT = re.compile(r"<text([^>]*)>(.*?)</text>", re.S)
_POINTS = re.compile(r'points="([^"]+)"')


@dataclass(frozen=True)
class Overflow:
    group: str
    text: str
    by: float
    """Points the text runs past its box."""


def have_fonts() -> bool:
    return all((DEJAVU / face).exists() for face in _FACES.values())


@cache
def _font(kind: str, bold: bool, size: float):  # type: ignore[no-untyped-def]
    from PIL import ImageFont

    return ImageFont.truetype(str(DEJAVU / _FACES[kind, bold]), size)


def _attr(attrs: str, name: str, default: str = "") -> str:
    found = re.search(rf'{name}="([^"]*)"', attrs)
    return found.group(1) if found else default


def overflows(svg: str, slack: float = 0.5) -> list[Overflow]:
    """Texts wider than the box around them (measured with DejaVu), by group."""
    import html

    out = []
    for group, _, body in _GROUP.findall(svg):
        xs = [float(p.split(",")[0]) for points in _POINTS.findall(body) for p in points.split()]
        if not xs:
            continue
        left, right = min(xs), max(xs)
        for attrs, raw in _TEXT.findall(body):
            text = html.unescape(re.sub(r"<[^>]+>", "", raw))
            family = _attr(attrs, "font-family").lower()
            kind = "mono" if any(word in family for word in ("mono", "courier")) else "sans"
            bold = _attr(attrs, "font-weight") == "bold" or '<tspan font-weight="bold"' in raw
            width = _font(kind, bold, float(_attr(attrs, "font-size", "14"))).getlength(text)
            x = float(_attr(attrs, "x"))
            anchor = _attr(attrs, "text-anchor", "start")
            start = x - width / 2 if anchor == "middle" else x - width if anchor == "end" else x
            past = max(left - start, start + width - right)
            if past > slack:
                out.append(Overflow(group, text, round(past, 1)))
    return out
