"""Every private Textual API the TUI relies on, in one place, each with the Textual version it
was written against. Nothing else in mcinspect touches a private name of Textual.

| private API | why the TUI uses it | written against |
|---|---|---|
| `Widget._size_updated(size, virtual_size, container_size, layout)` (overridden) | store the size a layout pass measured without asking for another pass (`SizedByLayout`), and skip scrollbar repaints when nothing they show changed (`MeasuredOnce`) | 8.2.8 |
| `Widget._on_focus` / `Widget._on_blur` (overridden) | a focus change repaints only the lines it changes, not the whole view (`QuietFocus`) | 8.2.8 |
| `Widget._vertical_scrollbar` / `Widget._horizontal_scrollbar` | the scrollbar slots, filled with a bar sized in one pass (`scrollbar_slot`, `fill_scrollbar_slot`) | 8.2.8 |
| `App._start_widget(parent, widget)` | mount that bar at once, as Widget does for its own (`start_widget`) | 8.2.8 |
| `ScrollView._scroll_update(virtual_size)` | move the scrollbars in place when the content size changes (`scroll_update`) | 8.2.8 |

`missing()` names whatever the installed Textual lacks (a test checks it); `pyproject.toml` bounds
textual to the versions the TUI tests passed on.
"""

from __future__ import annotations

import inspect

from textual import events
from textual.app import App
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.widget import Widget

WRITTEN_AGAINST = "8.2.8"

_REQUIRED: list[tuple[type, str, tuple[str, ...]]] = [
    (Widget, "_size_updated", ("self", "size", "virtual_size", "container_size", "layout")),
    (Widget, "_on_focus", ("self", "event")),
    (Widget, "_on_blur", ("self", "event")),
    (App, "_start_widget", ("self", "parent", "widget")),
    (ScrollView, "_scroll_update", ("self", "virtual_size")),
]
"""(class, private method, its parameters as written against)."""
_SLOTS = ("_vertical_scrollbar", "_horizontal_scrollbar")
"""Private attributes of every Widget instance."""


def missing() -> list[str]:
    """The private APIs above that the installed Textual lacks or changed (empty: all there)."""
    out = []
    for owner, name, parameters in _REQUIRED:
        method = getattr(owner, name, None)
        if method is None:
            out.append(f"{owner.__name__}.{name}")
        elif tuple(inspect.signature(method).parameters) != parameters:
            out.append(f"{owner.__name__}.{name}{tuple(inspect.signature(method).parameters)} (expected {parameters})")
    probe = Widget()
    out += [f"Widget.{slot}" for slot in _SLOTS if not hasattr(probe, slot)]
    return out


class SizedByLayout(Widget):
    """Mix in before a Widget class: the measured size is stored without a layout request
    (Textual keeps it in the reactive `virtual_size`, which asks for a pass whenever it changes)."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # A container sized by its content (`height: auto`) arranges its children again at the
        # size it now has: that one still takes Textual's extra pass.
        layout = layout and self.is_container and self.styles.auto_dimensions
        return super()._size_updated(size, virtual_size, container_size, layout)


class MeasuredOnce:
    """Mix in before ScrollView: update the scrollbars only when what they show changed.

    A plain class, not a Widget: Textual takes CSS (and type names) from the first Widget base
    only, which must stay the ScrollView."""

    _measured: tuple[Size, Size, Size] | None = None
    """(size, virtual size, container size) at the latest layout pass that changed one."""

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # ScrollView compares `virtual_size` (here the viewport the compositor measured) with its
        # own (the content), which differ whenever the view scrolls: every layout pass anywhere
        # on screen repainted this view's scrollbars (~1 ms each).
        measured = (size, self.virtual_size, container_size)  # type: ignore[attr-defined]
        if measured == self._measured:
            return False
        self._measured = measured
        return super()._size_updated(size, virtual_size, container_size, layout)  # type: ignore[misc]


class QuietFocus:
    """Mix in before a Widget class: focus and blur set `has_focus` and tell the parent, without
    Widget's own repaint of every line (~4 ms for a tree); the lines that change repaint
    themselves. A plain class, as MeasuredOnce."""

    def _on_focus(self: Widget, event: events.Focus) -> None:  # type: ignore[misc]
        event.prevent_default()
        self.has_focus = True
        if self.parent is not None:
            self.parent.post_message(events.DescendantFocus(self))

    def _on_blur(self: Widget, event: events.Blur) -> None:  # type: ignore[misc]
        event.prevent_default()
        self.has_focus = False
        if self.parent is not None:
            self.parent.post_message(events.DescendantBlur(self))


def scrollbar_slot(widget: Widget, *, vertical: bool) -> ScrollBar | None:
    """The widget's scrollbar, if it made one yet."""
    return widget._vertical_scrollbar if vertical else widget._horizontal_scrollbar


def fill_scrollbar_slot(widget: Widget, bar: ScrollBar, *, vertical: bool) -> None:
    if vertical:
        widget._vertical_scrollbar = bar
    else:
        widget._horizontal_scrollbar = bar


def start_widget(app: App[object], parent: Widget, widget: Widget) -> None:
    """Mount `widget` under `parent` now (as Widget mounts its own scrollbars)."""
    app._start_widget(parent, widget)


def scroll_update(view: ScrollView, virtual_size: Size) -> None:
    """Resize the scrollbars of `view` for content of `virtual_size`, in place."""
    view._scroll_update(virtual_size)
