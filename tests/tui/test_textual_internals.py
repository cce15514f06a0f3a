"""The private Textual APIs the TUI relies on exist, with the parameters they were written
against, in the installed Textual (mcinspect/tui/textual_internals.py)."""

from __future__ import annotations

from mcinspect.tui import textual_internals


def test_every_private_api_the_tui_uses_is_there() -> None:
    assert textual_internals.missing() == []
