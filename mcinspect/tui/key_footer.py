"""The footer: Textual's, rebuilt only when the keys it shows change."""

from __future__ import annotations

from textual.widgets import Footer

KeyRow = tuple[tuple[str, str, str, bool, str], ...]
"""(key, action, description, enabled, tooltip) per key shown."""


class KeyFooter(Footer):
    """Footer re-creates its key widgets whenever the focus moves (a mount and a layout pass:
    tens of milliseconds). Every panel's own keys are hidden (`show=False`), so moving between
    panels would rebuild the very same row; this footer skips that."""

    _composed: KeyRow | None = None

    def _shown(self) -> KeyRow:
        palette = self.app.COMMAND_PALETTE_BINDING if self.show_command_palette else None
        return tuple(
            (key, binding.action, binding.description, enabled, tooltip)
            for key, (_, binding, enabled, tooltip) in self.screen.active_bindings.items()
            if binding.show or key == palette
        )

    async def recompose(self) -> None:
        shown = self._shown() if self._bindings_ready else None  # not ready: Footer composes nothing
        if shown is None or shown != self._composed:
            self._composed = shown
            await super().recompose()
