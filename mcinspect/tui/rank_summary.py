"""The cross-rank summary (the ranks tab): each rank at the step on view, side by side, with
`tp-agree`'s verdict there (pure: the app computes it on a worker thread).

Each rank is compared with its reference rank (checks/cross_rank.py: the first rank that runs
the same batches) at the same step; a rank that has no frame at that step (a sampled live
stream captures each rank at its own moments) says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text

from ..checks import Violation
from ..checks.cross_rank import MAX_PER_STEP, reference_ranks
from ..schema import CacheState, Counters, EngineInfo
from .findings import Findings
from .model import SlotOwner, slot_owner
from .row_table import Cells
from .source import DataSource, FrameGone, FrameMeta, SourceHealth


@dataclass(frozen=True)
class RankInput:
    """What the summary reads of one rank (taken on the UI thread, read on a worker)."""

    source: DataSource
    frames: Sequence[FrameMeta]
    findings: Findings


@dataclass(frozen=True)
class RankRow:
    """One rank at the step on view."""

    rank: int
    name: str
    engine: EngineInfo | None
    health: SourceHealth
    step: int | None
    """The step of the frame shown for this rank: the step on view, or none if it has no frame there."""
    nodes: int = 0
    slots_in_use: int = 0
    slots: int = 0
    requests: int = 0
    counters: Counters = Counters()
    violations: int = 0
    """Violations the per-rank checks found on this rank so far."""
    reference: int | None = None
    """The rank this one is compared with; None: it is a reference itself."""
    differences: tuple[Violation, ...] = ()
    verdict: str = ""
    """`reference`, `agrees`, `DIFFERS`, `comparing`, `not compared`."""
    note: str = ""
    """The verdict's reason: the first difference, whom a reference is compared with, ..."""


@dataclass(frozen=True)
class RanksSummary:
    step: int | None
    rows: tuple[RankRow, ...]

    @property
    def agree(self) -> bool | None:
        """All compared ranks agree (None: nothing was compared yet)."""
        compared = [row for row in self.rows if row.reference is not None and row.step is not None and row.verdict != "comparing"]
        return None if not compared else not any(row.differences for row in compared)


Verdicts = Callable[[int, int], tuple[Violation, ...] | None]
"""(rank, its frame index) -> tp-agree's findings at that frame, None while not compared yet."""


def summarise(step: int | None, ranks: Sequence[RankInput], verdicts: Verdicts) -> RanksSummary:
    """Every rank at `step` (the step on view), and each compared with its reference there:
    `verdicts` says what the ranks' running comparison found (agreement.py; not compared again
    here: a tree of 100k nodes compared whole is 0.3 s a rank)."""
    states = [_state_at(rank, step) for rank in ranks]
    references = reference_ranks([rank.source.engine() for rank in ranks])
    rows = []
    for index, (rank, found) in enumerate(zip(ranks, states, strict=True)):
        frame, state = found if found is not None else (None, None)
        reference = references[index]
        differences: tuple[Violation, ...] = ()
        if reference is None:
            verdict, note = "reference", _reference_note(index, references)
        elif state is None or states[reference] is None:
            verdict, note = "not compared", f"{'this rank' if state is None else f'rank {reference}'} has no frame at step {step}"
        else:
            assert frame is not None  # a rank's state is its frame's
            known = verdicts(index, frame.index)
            if known is None:
                verdict, note = "comparing", f"tp-agree has not reached step {step} yet"
            else:
                differences = known
                verdict = f"DIFFERS ({len(differences)}{'+' if len(differences) >= MAX_PER_STEP else ''})" if differences else "agrees"
                note = differences[0].reason if differences else f"same nodes, slot owners and requests as rank {reference}"
        rows.append(
            RankRow(
                rank=index,
                name=rank.source.name,
                engine=rank.source.engine(),
                health=rank.source.health(),
                step=None if state is None else state.step,
                nodes=0 if state is None else len(state.nodes),
                slots_in_use=0 if state is None else sum(slot_owner(claims) is not SlotOwner.FREE for claims in state.slots.values()),
                slots=0 if state is None else len(state.slots),
                requests=0 if state is None else len(state.requests),
                counters=frame.engine if frame is not None else Counters(),
                violations=len(rank.findings.violations()),
                reference=reference,
                differences=differences,
                verdict=verdict,
                note=note,
            )
        )
    return RanksSummary(step, tuple(rows))


def _state_at(rank: RankInput, step: int | None) -> tuple[FrameMeta, CacheState] | None:
    """The rank's frame at `step` (its last one there) and its state, if it has one."""
    if step is None:
        return None
    at_step = [frame for frame in rank.frames if frame.step == step]
    if not at_step:
        return None
    try:
        return at_step[-1], rank.source.state_at(at_step[-1].index)
    except FrameGone:
        return None


def _reference_note(rank: int, references: Sequence[int | None]) -> str:
    compared = [other for other, reference in enumerate(references) if reference == rank]
    if not compared:
        return "no other rank runs its batches (attention DP: each group schedules its own)"
    return "the ranks compared with it: " + ", ".join(str(other) for other in compared)


COLUMNS = ("rank", "tp/dp", "step", "tp-agree", "violations", "nodes", "slots in use", "requests", "drops", "hook errors", "why")


def row_cells(row: RankRow) -> Cells:
    engine = row.engine
    placement = f"tp{engine.tp_rank}/dp{engine.dp_rank}" if engine is not None else "?"
    seen = row.step is not None
    return (
        str(row.rank),
        placement,
        str(row.step) if seen else "-",
        row.verdict,
        str(row.violations),
        str(row.nodes) if seen else "-",
        f"{row.slots_in_use}/{row.slots}" if seen else "-",
        str(row.requests) if seen else "-",
        str(row.counters.dropped),
        str(row.counters.hook_errors),
        row.note,
    )


def rank_details(summary: RanksSummary | None, rank: int) -> Text:
    """The detail pane for a rank of the ranks tab: where it is, and every disagreement at the step."""
    if summary is None or not 0 <= rank < len(summary.rows):
        return Text("comparing the ranks…", style="italic")
    row = summary.rows[rank]
    text = Text()
    text.append(f"rank {row.rank} ", style="bold")
    text.append(f"{row.name}  ")
    if row.engine is not None:
        text.append(f"tp {row.engine.tp_rank} of {row.engine.tp_size}, dp {row.engine.dp_rank}, pid {row.engine.pid}  ", style="grey70")
    text.append(f"{row.health.status}\n")
    text.append(f"step {summary.step}: {row.verdict}: {row.note}\n", style="bold red" if row.differences else "")
    for violation in row.differences[1:]:
        text.append(f"  {violation.reason}\n", style="red")
    text.append("enter: show this rank at the same step (R: the next rank); its violations tab lists every step's tp-agree", style="grey62")
    return text
