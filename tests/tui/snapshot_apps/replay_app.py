"""The inspector replaying a committed recording of the real CPU engine, clock pinned.

tests/tui/recordings/ holds `clean.mcrec` and `fault.mcrec` (double-owner fault), and two ranks of
`demo --tp 2`: `tp2.mcrec` with `tp2.rank1.mcrec`, and the same with the tp-desync fault
(`tp2-desync`), written by scripts/make-tui-recordings.sh. Look at one:
`python tests/tui/snapshot_apps/replay_app.py tp2-desync`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcinspect.checks import Violation
from mcinspect.recording import RecordingReader
from mcinspect.schema import CacheState, Delta, Step
from mcinspect.tui import Checker, DataSource, InspectorApp, RankSources, ReplaySource, SourceHealth, load_recordings
from mcinspect.tui import real_checks as real_checks_for
from mcinspect.tui.details import claim_text
from mcinspect.tui.model import SlotOwner, slot_owner
from mcinspect.tui.source import FrameMeta

RECORDINGS = Path(__file__).parent.parent / "recordings"
PINNED_NOW = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the only clock the app reads (export names); replays show no frame times."""


def load(name: str, source_class: type[ReplaySource] = ReplaySource, label: str | None = None) -> ReplaySource:
    """A committed recording as the app's source."""
    path = RECORDINGS / f"{name}.mcrec"
    reader = RecordingReader(path)
    return source_class(list(reader), reader.info, label or path.name)


def claimed_twice(previous: CacheState | None, state: CacheState, frame: FrameMeta, delta: Delta | None) -> list[Violation]:
    """A stand-in for mcinspect.checks in the snapshot tests, so that their baselines change with
    the TUI and not with the checks' wording: each slot at the step it became claimed twice."""
    found = []
    for slot, claims in sorted(state.slots.items()):
        if slot_owner(claims) is not SlotOwner.MULTIPLE:
            continue
        if previous is not None and slot_owner(previous.slots.get(slot, [])) is SlotOwner.MULTIPLE:
            continue
        found.append(
            Violation(
                check="claimed-twice",
                step=Step(state.step),
                reason=f"slot {slot}: " + "; ".join(claim_text(claim) for claim in claims),
                nodes=tuple(claim.node for claim in claims if claim.kind == "tree"),
                slots=(slot,),
                rids=tuple(claim.rid for claim in claims if claim.rid),
            )
        )
    return found


def stand_in_checks(source: DataSource) -> Checker:
    """`claimed_twice` for every rank (it keeps no state)."""
    return claimed_twice


def make_app(name: str = "fault", *, real_checks: bool = False, export_dir: Path | None = None) -> InspectorApp:
    """A recording as `mcinspect replay` shows it, checked by `claimed_twice` or (`real_checks`)
    by mcinspect.checks."""
    source = load(name)
    checks = real_checks_for if real_checks else stand_in_checks
    return InspectorApp(source, checks=checks, clock=lambda: PINNED_NOW, export_dir=export_dir)


def load_ranks(name: str) -> RankSources:
    """A committed recording with its other ranks' files, as `mcinspect replay` opens it."""
    return RankSources(load_recordings(str(RECORDINGS / f"{name}.mcrec")))


def make_ranks_app(name: str = "tp2-desync") -> InspectorApp:
    """Every rank of a two-rank recording, checked by `claimed_twice` (tp-agree across ranks is the app's own)."""
    return InspectorApp(load_ranks(name), checks=stand_in_checks, clock=lambda: PINNED_NOW)


class DisconnectedReplay(ReplaySource):
    """A live source whose engine went away after these frames (history kept)."""

    live = True

    def health(self) -> SourceHealth:
        return SourceHealth(
            status="disconnected", dropped=3, gaps=1, resyncs=1,
            last_error="no answer from 127.0.0.1:7777 within 5 s; is the engine running with MCINSPECT_PORT?",
        )  # fmt: skip


def make_disconnected_app() -> InspectorApp:
    """The fault recording as a live engine that has just gone away."""
    source = load("fault", DisconnectedReplay, label="127.0.0.1:7777")
    return InspectorApp(source, checks=stand_in_checks, clock=lambda: PINNED_NOW)


if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "fault"
    InspectorApp(load_ranks(name), checks=real_checks_for, clock=lambda: PINNED_NOW).run()
