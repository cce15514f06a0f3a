"""The app's layout: header, tree on the left, tabbed panels and the detail pane on the right."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static, TabbedContent

from .event_log import EventLog
from .grids import PageMap, SlotMap
from .header import StatusHeader
from .key_footer import KeyFooter
from .legend import Legend
from .palette import page_legend, slot_legend
from .ranks_table import RanksTable
from .requests_table import RequestsTable
from .sized_by_layout import Pane
from .tree_view import RadixTreeView
from .violations_table import ViolationsTable

TABS = ("slots", "pages", "requests", "events", "violations", "ranks")
"""Tab ids, in the order of their number keys (1-6); `ranks` is shown only for several ranks."""
TAB_FOCUS = {
    "slots": "slot-map",
    "pages": "page-map",
    "requests": "request-table",
    "events": "event-lines",
    "violations": "violation-table",
    "ranks": "rank-table",
}
"""The widget that takes the focus when a tab is shown."""

LAYOUT_CSS = """
#body { height: 1fr; }
#tree-pane { width: 46%; border: round $primary; border-title-style: bold; }
#tree-pane:focus-within { border: round $accent; }
#right { width: 1fr; }
#tabs { height: 1fr; }
/* Not Textual's `auto`: a pane sized by its content takes a second layout pass on its first show. */
#tabs ContentSwitcher { height: 1fr; }
#tabs TabPane { padding: 0; height: 1fr; }
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
                with Pane("1 Slots", id="slots"):
                    yield SlotMap(id="slot-map")
                    yield Legend(slot_legend())
                with Pane("2 Pages", id="pages"):
                    yield PageMap(id="page-map")
                    yield Legend(page_legend())
                with Pane("3 Requests", id="requests"):
                    yield RequestsTable(id="request-table")
                with Pane("4 Events", id="events"):
                    yield EventLog(id="event-log")
                with Pane("5 Violations", id="violations"):
                    yield ViolationsTable(id="violation-table")
                with Pane("6 Ranks", id="ranks"):
                    yield RanksTable(id="rank-table")
            with VerticalScroll(id="detail-pane"):
                yield Static(id="detail")
    yield KeyFooter()
