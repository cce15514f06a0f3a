"""The ranks the inspector follows: a `RankView` per rank's source (a live engine's ranks appear
once discovered), the rank on view, `tp-agree` between them (agreement.py) and the ranks tab's
comparison at a step (rank_summary.py, on a worker). What the panels show of them is the app's.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import App

from ..checks import Violation
from ..checks.cross_rank import TP_AGREE
from .agreement import AgreementIngestor
from .findings import Findings
from .ingest import Ingestor
from .rank_sources import RankSources
from .rank_summary import RankInput, RanksSummary, summarise
from .rank_view import RankView, frame_at_step
from .source import DataSource
from .violations import Checker

CheckerFactory = Callable[[DataSource], Checker | None]
"""A Checker for one rank's source (checkers keep state per stream: one each)."""


class FollowedRanks:
    """Every rank's source, findings and frames, and which rank is on view (UI thread only)."""

    def __init__(self, app: App[None], sources: RankSources, checks: CheckerFactory | None) -> None:
        self.sources = sources
        self._app = app
        self._checks = checks
        self.views: list[RankView] = []
        """One per rank, in rank order."""
        self.on_view = 0
        """The rank on view (an index into `views`)."""
        self._agreement = AgreementIngestor(app, lambda: self.views)
        self.sync()

    @property
    def current(self) -> RankView:
        """The rank on view."""
        return self.views[self.on_view]

    @property
    def several(self) -> bool:
        """Whether the engine has several ranks (then `R` and the ranks tab exist)."""
        return len(self.views) > 1

    def sync(self) -> bool:
        """Take in the ranks' sources (a live engine's appear once discovered); whether they changed."""
        sources = self.sources.sources()
        if [id(view.source) for view in self.views] == [id(source) for source in sources]:
            return False
        known = {id(view.source): view for view in self.views}
        self.views = [known.get(id(source)) or self._rank_view(source) for source in sources]
        if self.on_view >= len(self.views):
            self.on_view = 0
        return True

    def _rank_view(self, source: DataSource) -> RankView:
        findings = Findings(self._checks(source) if self._checks is not None else None)
        return RankView(source, findings, Ingestor(self._app, source, findings))

    def take_frames(self) -> None:
        """Read every rank's frames and check the new ones: each rank's own checks, then tp-agree."""
        for view in self.views:
            view.frames = list(view.source.frames())
            if view.frames:
                view.ingestor.kick(view.frames[-1].index)
        self._agreement.kick()

    def compare(self) -> None:
        """Compare the ranks where both frames of a step are checked now (tp-agree, on a worker)."""
        self._agreement.kick()

    def differing_at(self, step: int) -> tuple[int, ...]:
        """The ranks whose tp-agree findings name `step` (from the findings: no comparing here)."""
        if not self.several:
            return ()
        differing = []
        for rank, view in enumerate(self.views):
            found = frame_at_step(view.frames, step)
            if found is not None and found[1] and any(row.check == TP_AGREE for row in view.findings.violations_at(found[0].index)):
                differing.append(rank)
        return tuple(differing)

    def summarise(self, step: int, done: Callable[[RanksSummary], None]) -> None:
        """Compare the ranks at `step` on a worker (a tree of 100k nodes per rank); `done` gets
        the summary on the UI thread."""
        inputs = [RankInput(view.source, list(view.frames), view.findings) for view in self.views]
        agreement = self._agreement

        def verdicts(rank: int, index: int) -> tuple[Violation, ...] | None:
            if not agreement.compared(rank, index):
                return None
            return tuple(row.violation for row in inputs[rank].findings.violations_at(index) if row.check == TP_AGREE)

        def run() -> None:
            summary = summarise(step, inputs, verdicts)
            self._app.call_from_thread(done, summary)

        self._app.run_worker(run, thread=True, group="ranks", exclusive=True, exit_on_error=False)

    def export_tag(self) -> str:
        """`-rank1` in an export's name when the engine has several ranks."""
        return f"-rank{self.on_view}" if self.several else ""
