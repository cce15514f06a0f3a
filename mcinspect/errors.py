"""The one root of mcinspect's errors: each carries its message (one line, naming the fix) and
the exit code the CLI ends with. The CLI catches `McinspectError` once, at its entry
(`cli.McinspectGroup`); commands just let it rise.

| exit code | meaning |
|---|---|
| 0 | done, nothing found |
| 1 | `check`: violations found |
| 2 | bad input or usage: a file, a target, an option, an engine that refuses or does not answer, a check that crashed |
| 130 / 143 | stopped by Ctrl-C / SIGTERM |
"""

from __future__ import annotations

BAD_INPUT = 2
"""Exit code of every McinspectError unless a subclass says otherwise."""


class McinspectError(Exception):
    """Something mcinspect cannot do with what it was given; `str()` is one line for a person."""

    exit_code = BAD_INPUT


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's text on one line, at most `limit` characters (a hostile peer or file
    may put megabytes into a message)."""
    text = " ".join(str(exc)[: limit * 4].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
