"""Command-palette entries: every action a key is bound to, findable by name (ctrl+p)."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand

from .panels import TABS

PALETTE = [
    ("Pause / live", "Stop or resume following the engine", "pause"),
    ("Step back", "Show the previous frame", "step(-1)"),
    ("Step forward", "Show the next frame", "step(1)"),
    ("Go to step", "Show the frame of a given step", "goto_step"),
    ("Go live", "Show the newest frame and follow the engine", "live"),
    ("Search tokens", "Find nodes by token ids", "search"),
    ("Next violation", "Jump to the next violation", "next_violation"),
    ("Export snapshot JSON", "Write the state at this step as JSON", "export_json"),
    ("Save screenshot", "Write an SVG screenshot", "screenshot"),
    ("Render tree SVG", "Graphviz render of the tree, violations highlighted", "render_tree"),
    *((f"Show {tab}", f"Switch to the {tab} tab", f"show_tab('{tab}')") for tab in TABS),
]
"""(title, help, action string as in BINDINGS)."""


def palette_commands(app: App[None]) -> Iterable[SystemCommand]:
    """PALETTE as SystemCommands that run their action on `app`."""
    for title, help_text, action in PALETTE:
        yield SystemCommand(title, help_text, lambda action=action: app.run_action(action))
