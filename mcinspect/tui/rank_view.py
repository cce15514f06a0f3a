"""What the inspector keeps per rank of the engine: its source, its findings (checked on a worker
of their own, so every rank's violations are counted while one is on view) and its frames; and
where a step lies among a rank's frames (switching ranks keeps the step)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .findings import Findings
from .ingest import Ingestor
from .source import DataSource, FrameMeta


@dataclass
class RankView:
    source: DataSource
    findings: Findings
    ingestor: Ingestor
    frames: list[FrameMeta] = field(default_factory=list)
    """The source's frames as of the last SourceChanged (what the app shows)."""


def frame_at_step(frames: Sequence[FrameMeta], step: int) -> tuple[FrameMeta, bool] | None:
    """The frame of `step` among a rank's frames, and whether it is that step exactly: the last
    frame at `step`, else the last one before it (a sampled stream may lack the step), else the
    first one; None without frames."""
    if not frames:
        return None
    exact = [frame for frame in frames if frame.step == step]
    if exact:
        return exact[-1], True
    earlier = [frame for frame in frames if frame.step < step]
    return (earlier[-1] if earlier else frames[0]), False
