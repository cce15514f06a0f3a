"""The app's screens: the main one, the help screen and a one-line prompt (go to step, search
tokens)."""

from __future__ import annotations

import inspect
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.reactive import Reactive
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Input, Label, Markdown


def key_table(cls: type) -> str:
    """The markdown key table of a class's docstring (its lines starting with `|`)."""
    doc = inspect.getdoc(cls) or ""
    return "\n".join(line for line in doc.splitlines() if line.startswith("|"))


class MainScreen(Screen[None]):
    """The screen every panel lives on.

    Textual's Screen repaints all of itself whenever the focus moves (a tab switch, `t`): ~5 ms
    of compositing at 160x48 for nothing, since the widgets whose look depends on the focus
    restyle and repaint themselves.
    """

    focused: Reactive[Widget | None] = Reactive(None, repaint=False)


class HelpScreen(ModalScreen[None]):
    """The key maps of the app and its panels, from their docstrings."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close", show=True),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%; height: 90%; border: thick $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, sections: list[tuple[str, type]]) -> None:
        super().__init__()
        self._markdown = "\n\n".join(f"## {title}\n\n{key_table(cls)}" for title, cls in sections)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown("# mcinspect keys\n\nEscape closes this screen; ctrl+p opens the command palette.\n\n" + self._markdown)


class PromptScreen(ModalScreen[str | None]):
    """Ask for one line; dismisses with the text, or None on escape."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", show=True)]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical {
        width: 70; height: auto; border: thick $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, title: str, placeholder: str = "", value: str = "") -> None:
        super().__init__()
        self._title, self._placeholder, self._value = title, placeholder, value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self._title)
            yield Input(value=self._value, placeholder=self._placeholder)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
