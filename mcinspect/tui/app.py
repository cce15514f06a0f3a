"""The mcinspect TUI: every panel shows the cache at one selected frame of a DataSource.

Data flows one way. The source's thread (a Session reader, for a live engine) posts
`SourceChanged`; the app reads the source, follows the newest frame while live, and a worker
thread runs the checks over new frames (`Ingestor`, `Findings`) and posts `FindingsAdvanced`. Selecting a frame
(live, step back/forward, jump) rebuilds one `FrameView` and feeds the visible panels inside
`batch_update`; hidden tabs catch up when shown.

An engine of several ranks (`RankSources`: a TP engine's scheduler processes, or the rank files
of its recording) is followed rank by rank, each with its own source and findings
(`FollowedRanks`); the panels show one rank, `R` moves to the next at the same step, and the ranks
tab compares them at the step on view (rank_summary.py, on a worker).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Static, TabbedContent
from textual.worker import Worker, WorkerState

from ..errors import McinspectError
from ..schema import CacheState, NodeId, Rid, VerifyStats
from ..verify_command import Judged
from .cell_grid import CellGrid
from .commands import palette_commands
from .details import Selection, detail_text
from .event_log import EventLog
from .export import ExportFailed, export_snapshot, export_tree_svg, stamp
from .findings import Findings
from .followed_ranks import CheckerFactory, FollowedRanks
from .gc_tuning import freeze_long_lived, thaw
from .grids import PageMap, SlotMap
from .header import HeaderState, StatusHeader
from .messages import FindingsAdvanced, SourceChanged
from .model import FrameView
from .panels import LAYOUT_CSS, TAB_FOCUS, TABS, compose_layout
from .rank_sources import RankSources
from .rank_summary import RanksSummary, rank_details
from .rank_view import frame_at_step
from .ranks_table import RanksTable
from .requests_table import RequestsTable
from .row_table import RowTable
from .screens import HelpScreen, MainScreen, PromptScreen
from .source import DataSource, FrameGone, FrameMeta, NodeChanges, deltas_between, moved_by
from .tree_view import RadixTreeView
from .violations import ViolationRow
from .violations_table import ViolationsTable

VERIFIER_POLL_S = 2.0
"""How often the header asks the engine for its T2 verifier's queue and counts."""
LIVE_REFRESH_S = 0.1
"""Shortest time between two redraws while following a fast engine."""


class InspectorApp(App[None]):
    """Inspect the mamba prefix cache of an engine's scheduler processes, one rank at a time.

    | Key | Action |
    | :- | :- |
    | p | Pause / resume following the engine. |
    | [ / ] | One frame back / forward (pauses). |
    | { / } | Ten frames back / forward (pauses). |
    | g | Go to a step. |
    | G | Go live: the newest frame. |
    | / | Search nodes by token ids. |
    | n / N | Next / previous search match. |
    | v | Jump to the next violation. |
    | V | Verify the selected node now: the engine recomputes its state (T2). |
    | R | Next rank, at the same step (an engine of several TP ranks). |
    | t | Focus the radix tree. |
    | 1-6 | Slots, pages, requests, events, violations, ranks tab (ranks: several ranks side by side, tp-agree here). |
    | e | Export the state at this step as snapshot JSON. |
    | s | Save an SVG screenshot. |
    | r | Render the tree as SVG (mcinspect.render). |
    | ? | Help. |
    | ctrl+p | Command palette. |
    | q | Quit. |
    """

    TITLE = "mcinspect"
    CSS = LAYOUT_CSS

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "Pause/live"),
        Binding("left_square_bracket", "step(-1)", "Back"),
        Binding("right_square_bracket", "step(1)", "Fwd"),
        Binding("left_curly_bracket", "step(-10)", "Back 10", show=False),
        Binding("right_curly_bracket", "step(10)", "Fwd 10", show=False),
        Binding("g", "goto_step", "Go to step"),
        Binding("G", "live", "Live", show=False),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match(1)", "Next match", show=False),
        Binding("N", "next_match(-1)", "Prev match", show=False),
        Binding("v", "next_violation", "Next violation"),
        Binding("V", "verify_node", "Verify (T2)", show=False),
        Binding("R", "next_rank", "Next rank"),  # in the footer only with several ranks (check_action)
        Binding("t", "focus_tree", "Tree", show=False),
        *(Binding(str(n), f"show_tab('{tab}')", tab.capitalize(), show=False) for n, tab in enumerate(TABS, 1)),
        Binding("e", "export_json", "Export JSON", show=False),
        Binding("s", "screenshot", "Screenshot", show=False),
        Binding("r", "render_tree", "Tree SVG", show=False),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    # `var`, not `reactive`: a change must redraw the widgets that show it, not the whole screen.
    following: var[bool] = var(True)
    """Follow the newest frame (live) rather than stay on the selected one (paused)."""
    selection: var[Selection] = var(Selection("none"))

    def __init__(
        self,
        source: DataSource | RankSources,
        *,
        checks: CheckerFactory | None = None,
        clock: Callable[[], float] = time.time,
        export_dir: Path | None = None,
    ) -> None:
        """`source`: one scheduler process's, or every rank's; `checks` gives each rank's source
        the Checker run over its every frame (see `violations.real_checks`); `clock` names exports."""
        super().__init__()
        # No animations: the tab underline alone redraws for 0.3 s after every tab switch, CPU
        # that following a 100k-node cache needs.
        self.animation_level = "none"
        self.ranks = FollowedRanks(self, source if isinstance(source, RankSources) else RankSources([source]), checks)
        self._summary: RanksSummary | None = None
        """The ranks tab's latest comparison."""
        self.clock = clock
        self.export_dir = export_dir or Path.cwd()
        self.view: FrameView | None = None
        self._painted = False
        self._notified = threading.Event()
        self._last_refresh = 0.0
        self._refresh_timer_armed = False
        self._stale_tabs: set[str] = set(TABS)
        self._matches: list[NodeId] = []
        self._match_query: list[int] = []
        self._match_at = -1
        self._page_focus: Selection = Selection("none")
        """The node or request whose pages the page map highlights."""
        self._detail_shown: Text | None = None
        self._tree_title = ""
        self._verdicts: dict[NodeId, list[Judged]] = {}
        """`V`'s answers, by node."""
        self._verifier: VerifyStats | None = None
        """The engine verifier's counts, polled every VERIFIER_POLL_S while attached."""

    # --- ranks ------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """The rank on view."""
        return self.ranks.on_view

    @property
    def source(self) -> DataSource:
        """The source of the rank on view."""
        return self.ranks.current.source

    @property
    def findings(self) -> Findings:
        """The findings of the rank on view."""
        return self.ranks.current.findings

    @property
    def _frames(self) -> list[FrameMeta]:
        return self.ranks.current.frames

    def _show_ranks_tab(self) -> None:
        tabs = self.query_one(TabbedContent)
        if self.ranks.several:
            tabs.show_tab("ranks")
        else:
            tabs.hide_tab("ranks")
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`R` exists only with several ranks (then it is in the footer too)."""
        if action == "next_rank":
            return self.ranks.several
        return True

    def switch_rank(self, rank: int) -> None:
        """Show rank `rank` at the step on view (paused), or its newest frame (following)."""
        if not 0 <= rank < len(self.ranks.views) or rank == self.rank:
            return
        step = None if self.view is None else self.view.state.step
        self.ranks.on_view = rank
        self.view = None  # the previous frame is another rank's: nothing to patch from
        self._verdicts.clear()
        self._verifier = None
        self._stale_tabs = set(TABS)
        if self.following or step is None:
            if self._frames:
                self._follow_latest()
            else:
                self._refresh_header()
            return
        found = frame_at_step(self._frames, step)
        if found is None:
            self._refresh_header()
            return
        frame, exact = found
        self.show_frame(frame.index)
        if not exact:
            self.notify(f"rank {rank} has no frame at step {step}: showing step {frame.step}", severity="warning")

    def action_next_rank(self) -> None:
        self.switch_rank((self.rank + 1) % len(self.ranks.views))

    def on_ranks_table_switch_rank(self, message: RanksTable.SwitchRank) -> None:
        self.switch_rank(message.rank)

    @on(RowTable.RowHighlighted, "#rank-table")
    def _rank_highlighted(self, event: RowTable.RowHighlighted) -> None:
        if event.table.has_focus:
            self.selection = Selection("rank", int(event.key))

    def _ranks_summarised(self, summary: RanksSummary) -> None:
        if self.view is None or summary.step != self.view.state.step:
            return  # the view moved on meanwhile: its own comparison is on its way
        self._summary = summary
        table = self.query_one(RanksTable)
        table.show(summary)
        if self.selection.kind == "rank":
            table.move_to_key(str(self.selection.value))
            self._refresh_detail()

    def get_default_screen(self) -> Screen:
        return MainScreen(id="_default")

    def compose(self) -> ComposeResult:
        yield from compose_layout()

    def on_mount(self) -> None:
        self.query_one("#detail-pane").border_title = "details"
        self._show_ranks_tab()
        self._refresh_header()
        self.ranks.sources.start(self._notify)
        if self.ranks.sources.live:
            self.set_interval(VERIFIER_POLL_S, self._poll_verifier)

    def on_unmount(self) -> None:
        self.ranks.sources.close()
        thaw()

    # --- data arriving (any thread -> messages) -----------------------------------------------

    def _notify(self) -> None:
        """Called by the source's thread: one pending message at a time, however fast it calls."""
        if not self._notified.is_set():
            self._notified.set()
            self.post_message(SourceChanged())

    def on_source_changed(self, _: SourceChanged) -> None:
        self._notified.clear()
        if self.ranks.sync():
            self.view = None  # the placeholder's frame, if any, belongs to no rank
            self._show_ranks_tab()
        self.ranks.take_frames()
        if self.following and self._frames:
            wait = self._last_refresh + LIVE_REFRESH_S - time.monotonic()
            if wait > 0:
                if not self._refresh_timer_armed:
                    self._refresh_timer_armed = True
                    self.set_timer(wait, self._follow_latest)
                self._refresh_header()
                return
            self._follow_latest()
        else:
            self._refresh_header()

    def _follow_latest(self) -> None:
        self._refresh_timer_armed = False
        if self.following and self._frames:
            self.show_frame(self._frames[-1].index)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group in ("ingest", "agreement", "ranks") and event.state is WorkerState.ERROR:
            self.notify(f"checking frames failed: {event.worker.error!r}", severity="error", timeout=30)

    def on_findings_advanced(self, message: FindingsAdvanced) -> None:
        if message.new_violations and self.view is not None:
            here = self.findings.violations_at(self.view.frame)
            if here != self.view.violations:
                self.show_frame(self.view.frame, state=self.view.state)
                return
        self.ranks.compare()
        self._stale_tabs.update(("violations", "ranks"))
        self._refresh_active_tab()
        self._refresh_header()

    # --- showing a frame -------------------------------------------------------------------------

    def show_frame(self, index: int, *, state: CacheState | None = None) -> None:
        """Make frame `index` the one every panel shows (clamped into the held frames)."""
        if not self._frames:
            return
        oldest, newest = self._frames[0].index, self._frames[-1].index
        index = min(max(index, oldest), newest)
        previous = self.view
        changes = None
        # Forward a few frames (following a live engine): the frame on view moved by the deltas
        # between, and their node changes (a 100k-node frame rebuilt by the source was tens of
        # ms of the UI thread, and its changed nodes a scan of every node).
        forward = deltas_between(self.source, previous.frame, index) if state is None and previous is not None else None
        if previous is not None and forward:
            state, changes = moved_by(previous.state, forward), NodeChanges.across(forward)
        try:
            cache_state = state if state is not None else self.source.state_at(index)
        except FrameGone:
            self.notify(f"frame {index} has left the history", severity="warning")
            return
        # Else between neighbours the source's node changes (one step back: read backwards);
        # other jumps find the changed nodes by a scan.
        if changes is None and previous is not None:
            if previous.frame == index - 1:
                changes = self.source.node_changes(index)
            elif previous.frame == index + 1 and (back := self.source.node_changes(index + 1)):
                changes = back.reversed()
        self.view = FrameView(index, cache_state, self.findings.violations_at(index), previous=previous, changes=changes)
        self._last_refresh = time.monotonic()
        self._stale_tabs = set(TABS)
        with self.batch_update():
            self._refresh_header()
            tree = self.query_one(RadixTreeView)
            tree.show(self.view)
            self._refresh_marks()
            self._refresh_active_tab()
            self._refresh_detail()
        if not self._painted:
            self._painted = True
            self.call_after_refresh(self._after_first_paint)

    def _after_first_paint(self) -> None:
        freeze_long_lived()
        # The page index costs O(nodes) once (later frames patch it): build it now, off the UI
        # thread, with the page owners that come from it, rather than when the page map is
        # first shown.
        view = self.view
        if view is not None:
            self.run_worker(lambda: view.page_owners, thread=True, group="warm-up")

    def _frame_position(self) -> int | None:
        if self.view is None or not self._frames:
            return None
        return self.view.frame - self._frames[0].index

    def _refresh_header(self) -> None:
        position = self._frame_position()
        frame = self._frames[position] if position is not None and 0 <= position < len(self._frames) else None
        self.query_one(StatusHeader).show(
            HeaderState(
                source=self.source.name,
                engine=self.source.engine(),
                health=self.source.health(),
                step=None if self.view is None else self.view.state.step,
                frame=position,
                frames=len(self._frames),
                live=self.source.live,
                following=self.following,
                violations=len(self.findings.violations()),
                violations_here=0 if self.view is None else len(self.view.violations),
                received_at=None if frame is None else frame.received_at,
                verifier=self._verifier,
                rank=self.rank,
                ranks=len(self.ranks.views),
                differing=() if self.view is None else self.ranks.differing_at(self.view.state.step),
            )
        )
        if self.view is None:
            title = "radix tree: waiting for the first snapshot"
        else:
            matches = f", {len(self._matches)} matches" if self._match_query else ""
            title = f"radix tree: {len(self.view.state.nodes)} nodes{matches}"
        if title != self._tree_title:  # setting a border title repaints the whole tree pane
            self._tree_title = title
            self.query_one("#tree-pane").border_title = title

    def _refresh_active_tab(self) -> None:
        tab = self.query_one(TabbedContent).active
        if self.view is None or tab not in self._stale_tabs:
            return
        self._stale_tabs.discard(tab)
        view = self.view
        if tab == "slots":
            self.query_one(SlotMap).show(view)
        elif tab == "pages":
            self.query_one(PageMap).show(view, self._page_marks())
        elif tab == "requests":
            self.query_one(RequestsTable).show(view)
        elif tab == "events":
            self.query_one(EventLog).show(self._frames, view.frame)
        elif tab == "violations":
            self.query_one(ViolationsTable).show(self.findings.violations(), view.frame)
        elif tab == "ranks":
            self.ranks.summarise(view.state.step, self._ranks_summarised)

    def _page_marks(self) -> bytearray:
        assert self.view is not None
        focus = self._page_focus
        if focus.kind == "node":
            return self.view.pages_of(node=NodeId(int(focus.value)))
        if focus.kind == "request":
            return self.view.pages_of(rid=Rid(str(focus.value)))
        return bytearray()

    def _refresh_marks(self) -> None:
        """Tree highlights: the selected request's path and the search matches."""
        assert self.view is not None
        on_path: set[NodeId] = set()
        if self._page_focus.kind == "request" and (req := self.view.state.requests.get(Rid(str(self._page_focus.value)))):
            on_path = set(self.view.path_to(req.last_node))
        if self._match_query:
            self._matches = self.view.search_tokens(self._match_query)
        self.query_one(RadixTreeView).mark(on_path=on_path, matches=set(self._matches))

    def _refresh_detail(self) -> None:
        detail = self.query_one("#detail", Static)
        if self.selection.kind == "rank":
            text = rank_details(self._summary, int(self.selection.value))
        else:
            text = detail_text(self.view, self.selection, self.findings, self._verdicts)
        if text != self._detail_shown:  # most live frames leave the selection as it was
            self._detail_shown = text
            # A layout pass restyles the whole screen: only a change of height needs one.
            height = detail.size.height
            detail.update(text, layout=False)
            if detail.get_content_height(detail.size, detail.size, detail.size.width) != height:
                detail.refresh(layout=True)

    def watch_following(self) -> None:
        if self.is_mounted:
            self._refresh_header()

    def watch_selection(self) -> None:
        self._refresh_detail()

    # --- selection from the panels -----------------------------------------------------------

    def on_radix_tree_view_node_highlighted(self, event: RadixTreeView.NodeHighlighted) -> None:
        # The message names its tree: it may arrive after the screen emptied (quitting right
        # after the first frame), when a query for the tree finds nothing.
        if event.node >= 0 and event.tree.has_focus:
            self.selection = Selection("node", event.node)
            self._page_focus = self.selection
            self._stale_tabs.add("pages")
            self._refresh_active_tab()

    @on(CellGrid.CellHighlighted)
    def _cell_highlighted(self, event: CellGrid.CellHighlighted) -> None:
        if not event.grid.has_focus:
            return
        if isinstance(event.grid, SlotMap) and (slot := event.grid.slot_at(event.index)) is not None:
            self.selection = Selection("slot", slot)
        elif isinstance(event.grid, PageMap):
            self.selection = Selection("page", event.index, full=isinstance(event, CellGrid.CellSelected))

    @on(RowTable.RowHighlighted, "#request-table")
    def _request_highlighted(self, event: RowTable.RowHighlighted) -> None:
        if event.table.has_focus:
            self.select_request(Rid(event.key))

    def select_request(self, rid: Rid) -> None:
        """Describe the request, mark its path in the tree and its pages in the page map."""
        self.selection = self._page_focus = Selection("request", rid)
        self._stale_tabs.add("pages")
        self._refresh_active_tab()
        if self.view is not None:
            self._refresh_marks()

    def on_tabbed_content_tab_activated(self, _: TabbedContent.TabActivated) -> None:
        self._refresh_active_tab()

    def on_violations_table_jump(self, message: ViolationsTable.Jump) -> None:
        self.jump_to(message.violation)

    def jump_to(self, violation: ViolationRow) -> None:
        """Show the violation's frame and select the slot, node or request it names."""
        self.following = False
        if not any(f.index == violation.frame for f in self._frames):
            self.notify(f"step {violation.step} has left the history", severity="warning")
            return
        self.show_frame(violation.frame)
        if violation.rid:
            self.select_request(violation.rid)
        if violation.node >= 0:
            self.query_one(RadixTreeView).reveal(violation.node)
            self.selection = Selection("node", violation.node)
        if violation.slot >= 0:
            self.action_show_tab("slots")
            self.query_one(SlotMap).select_slot(violation.slot)
            self.query_one(SlotMap).focus()
            self.selection = Selection("slot", violation.slot)
        elif violation.node >= 0:
            self.query_one(RadixTreeView).focus()
        elif violation.rid:
            self.action_show_tab("requests")
            self.query_one(RequestsTable).select_rid(violation.rid)

    # --- actions ------------------------------------------------------------------------------

    def action_pause(self) -> None:
        self.following = not self.following
        if self.following:
            self._follow_latest()

    def action_live(self) -> None:
        self.following = True
        self._follow_latest()

    def action_step(self, delta: int) -> None:
        if self.view is None:
            return
        self.following = False
        self.show_frame(self.view.frame + delta)

    def action_goto_step(self) -> None:
        def go(answer: str | None) -> None:
            if not answer:
                return
            try:
                step = int(answer)
            except ValueError:
                self.notify(f"not a step number: {answer!r}", severity="error")
                return
            earlier = [f for f in self._frames if f.step <= step]
            if not earlier:
                self.notify(f"step {step} is older than the history", severity="warning")
                return
            self.following = False
            self.show_frame(earlier[-1].index)

        self.push_screen(PromptScreen("Go to step", "a step number"), go)

    def action_search(self) -> None:
        def search(answer: str | None) -> None:
            if answer is None:
                return
            try:
                self._match_query = [int(word) for word in answer.replace(",", " ").split()]
            except ValueError:
                self.notify("token ids are integers, separated by spaces or commas", severity="error")
                return
            self._match_at = -1
            if self.view is not None:
                self._refresh_marks()
                self._refresh_header()
                if self._match_query and not self._matches:
                    self.notify("no node holds these tokens", severity="warning")
                self.action_next_match(1)

        query = " ".join(map(str, self._match_query))
        self.push_screen(PromptScreen("Search nodes by token ids (empty clears)", "e.g. 151644 872", query), search)

    def action_next_match(self, direction: int) -> None:
        if not self._matches:
            return
        self._match_at = (self._match_at + direction) % len(self._matches)
        tree = self.query_one(RadixTreeView)
        tree.reveal(self._matches[self._match_at])
        tree.focus()

    def action_next_violation(self) -> None:
        violations = self.findings.violations()
        if not violations:
            self.notify("no violations so far")
            return
        current = -1 if self.view is None else self.view.frame
        later = [v for v in violations if v.frame > current]  # violations() is in frame order
        self.jump_to(later[0] if later else violations[0])

    def action_verify_node(self) -> None:
        """The engine prefills the selected node's prefix alone and compares (on a worker)."""
        if self.selection.kind != "node":
            self.notify("select a node in the tree first", severity="warning")
            return
        node = NodeId(int(self.selection.value))

        def run() -> None:
            try:
                judged = self.source.verify([node])
            except McinspectError as exc:
                self.call_from_thread(self.notify, str(exc), severity="error")
                return
            self.call_from_thread(self._verified, node, judged)

        self.notify(f"verifying node #{node}: the engine recomputes its prefix")
        self.run_worker(run, thread=True, group="verify")

    def _verified(self, node: NodeId, judged: list[Judged]) -> None:
        self._verdicts[node] = judged
        for j in judged:
            if j.equal is None:
                self.notify(f"node #{node}: not verified: {j.verdict.error}", severity="warning")
            else:
                verdict = "equal" if j.equal else "MISMATCH"
                self.notify(f"node #{node}: {verdict} ({j.verdict.oracle} oracle)", severity="information" if j.equal else "error")
        self._refresh_detail()

    def _poll_verifier(self) -> None:
        def run() -> None:
            try:
                stats = self.source.verifier()
            except McinspectError:  # the header's connection status already says why
                return
            self.call_from_thread(self._verifier_polled, stats)

        self.run_worker(run, thread=True, group="verifier", exclusive=True)

    def _verifier_polled(self, stats: VerifyStats | None) -> None:
        if stats != self._verifier:
            self._verifier = stats
            self._refresh_header()

    def action_focus_tree(self) -> None:
        self.query_one(RadixTreeView).focus()

    def action_show_tab(self, tab: str) -> None:
        """Switch to `tab` and put the focus in it, so its keys work at once."""
        if tab == "ranks" and not self.ranks.several:
            self.notify("one rank: the ranks tab compares the ranks of a tensor-parallel engine")
            return
        self.query_one(TabbedContent).active = tab
        self._refresh_active_tab()
        self.query_one(f"#{TAB_FOCUS[tab]}").focus()
        if tab == "ranks":  # the detail pane describes the rank on view until the cursor moves
            self.selection = Selection("rank", self.rank)

    def action_export_json(self) -> None:
        position = self._frame_position()
        if self.view is not None and position is not None:
            state, frame = self.view.state, self._frames[position]
            rank = self.ranks.export_tag()
            self._export(lambda: export_snapshot(state, frame, self.export_dir, self.clock(), rank), off_thread=True)

    def action_screenshot(self) -> None:
        step = "none" if self.view is None else self.view.state.step
        name = f"mcinspect{self.ranks.export_tag()}-step{step}-{stamp(self.clock())}.svg"
        self._export(lambda: Path(self.save_screenshot(name, str(self.export_dir))), off_thread=False)

    def action_render_tree(self) -> None:
        if self.view is not None:
            state, violations, rank = self.view.state, [v.violation for v in self.view.violations], self.ranks.export_tag()
            self._export(lambda: export_tree_svg(state, violations, self.export_dir, self.clock(), rank), off_thread=True)

    def _export(self, write: Callable[[], Path], *, off_thread: bool) -> None:
        """Run one export and say where it went, or why it did not. JSON of a big state and
        Graphviz take seconds: those run on a thread (the screenshot must read the screen here)."""

        def run() -> None:
            severity: SeverityLevel = "information"
            try:
                message = f"wrote {write()}"
            except ExportFailed as exc:
                message, severity = str(exc), "error"
            except OSError as exc:
                message, severity = f"cannot write to {self.export_dir}: {exc.strerror}", "error"
            if off_thread:
                self.call_from_thread(self.notify, message, severity=severity)
            else:
                self.notify(message, severity=severity)

        if off_thread:
            self.run_worker(run, thread=True, group="export")
        else:
            run()

    def action_help(self) -> None:
        sections = [("Everywhere", InspectorApp), ("Radix tree", RadixTreeView), ("Slot and page maps", CellGrid), ("Tables", RowTable)]
        self.push_screen(HelpScreen(sections))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands, then every action a key is bound to (see commands.py)."""
        yield from super().get_system_commands(screen)
        yield from palette_commands(self)
