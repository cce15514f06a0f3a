"""Read back the text of `mcinspect snapshot --format tree`: which nodes got a line, what the
'…' lines count, and the final '+N nodes not shown' line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NODE = re.compile(r"(?:── |↳ )(?:! )?#(-?\d+) \[(\d+)\.\.(\d+)\)")
"""A node line (after its tree guide or run marker): id and token range."""
CHAIN = re.compile(r"(?:── |↳ )… ([\d,]+) nodes in a chain #-?\d+\.\.#-?\d+ \[(\d+)\.\.(\d+)\)")
FOLD = re.compile(r"(?:── |↳ )… ([\d,]+) more nodes? in [\d,]+ subtrees?(?:[^(]*\([^)]*\): ([\d,]+) tokens?)?")
"""A fold line: nodes, and tokens unless a narrow terminal cropped them."""
FOOTER = re.compile(r"^\+([\d,]+) nodes? not shown", re.MULTILINE)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass
class TreeLines:
    ids: list[int] = field(default_factory=list)
    """Nodes with a line of their own, in print order."""
    tokens: int = 0
    """Tokens of the node lines ([start, end) ranges)."""
    folded: int = 0
    """Nodes counted by chain and fold lines."""
    folded_tokens: int = 0
    footer: int | None = None
    """N of the final '+N nodes not shown' line, None without one."""


def parse_tree(text: str) -> TreeLines:
    lines = TreeLines()
    for line in text.splitlines():
        if node := NODE.search(line):
            lines.ids.append(int(node.group(1)))
            lines.tokens += int(node.group(3)) - int(node.group(2))
        elif chain := CHAIN.search(line):
            lines.folded += _int(chain.group(1))
            lines.folded_tokens += int(chain.group(3)) - int(chain.group(2))
        elif fold := FOLD.search(line):
            lines.folded += _int(fold.group(1))
            lines.folded_tokens += _int(fold.group(2) or "0")
    if footer := FOOTER.search(text):
        lines.footer = _int(footer.group(1))
    return lines
