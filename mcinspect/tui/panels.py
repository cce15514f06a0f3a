"""The app's layout: header, tree on the left, tabbed panels and the detail pane on the right."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static, TabbedContent, TabPane

from .event_log import EventLog
from .grids import PageMap, SlotMap
from .header import StatusHeader
from .key_footer import KeyFooter
from .legend import Legend
from .palette import page_legend, slot_legend
from .requests_table import RequestsTable
from .tree_view import RadixTreeView
from .violations_table import ViolationsTable

TABS = ("slots", "pages", "requests", "events", "violations")
"""Tab ids, in the order of their number keys (1-5)."""
TAB_FOCUS = {
    "slots": "slot-map",
    "pages": "page-map",
    "requests": "request-table",
    "events": "event-lines",
    "violations": "violation-table",
}
"""The widget that takes the focus when a tab is shown."""

LAYOUT_CSS = """
#body { height: 1fr; }
#tree-pane { width: 46%; border: round $primary; border-title-style: bold; }
#tree-pane:focus-within { border: round $accent; }
#right { width: 1fr; }
#tabs { height: 1fr; }
#tabs TabPane { padding: 0; }
#detail-pane { height: 11; border: round $secondary; border-title-style: bold; }
#detail { width: 1fr; }
"""


def compose_layout() -> ComposeResult:
    """Every widget, by id; the app feeds them."""
    yield StatusHeader(id="header")
    with Horizontal(id="body"):
        with Vertical(id="tree-pane"):
            yield RadixTreeView(id="tree")
        with Vertical(id="right"):
            with TabbedContent(id="tabs", initial="slots"):
                with TabPane("1 Slots", id="slots"):
                    yield SlotMap(id="slot-map")
                    yield Legend(slot_legend())
                with TabPane("2 Pages", id="pages"):
                    yield PageMap(id="page-map")
                    yield Legend(page_legend())
                with TabPane("3 Requests", id="requests"):
                    yield RequestsTable(id="request-table")
                with TabPane("4 Events", id="events"):
                    yield EventLog(id="event-log")
                with TabPane("5 Violations", id="violations"):
                    yield ViolationsTable(id="violation-table")
            with VerticalScroll(id="detail-pane"):
                yield Static(id="detail")
    yield KeyFooter()
