"""Write SVG screenshots of the TUI's main screens, replaying a recording (used by
scripts/make-screenshots.sh; the recordings come from the real embedded engine).

    python scripts/tui_screenshots.py RECORDING OUT_DIR            the one-rank screens
    python scripts/tui_screenshots.py --ranks RECORDING OUT_DIR    a two-rank recording's ranks tab
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mcinspect.checks.cross_rank import disagreements
from mcinspect.tui import InspectorApp, RankSources, ReplaySource, load_recording, load_recordings, real_checks

SIZE = (160, 45)


def busiest_step(source: ReplaySource) -> int:
    """The last step with the most requests held: the slot, page and request screens show it."""
    frames = source.frames()
    return max(frames, key=lambda f: (len(source.state_at(f.index).requests), f.index)).step


def first_difference(ranks: list[ReplaySource]) -> int:
    """The first step at which rank 1 differs from rank 0 (tp-agree's first finding)."""
    theirs = {frame.step: frame.index for frame in ranks[1].frames()}
    for frame in ranks[0].frames():
        if frame.step in theirs:
            ours, other = ranks[0].state_at(frame.index), ranks[1].state_at(theirs[frame.step])
            if disagreements(frame.step, ours, other, 1):
                return frame.step
    raise SystemExit("the ranks agree at every step: record with --fault tp-desync")


def screens(step: int) -> list[tuple[str, list[str]]]:
    """(file name, keys pressed before the shot)."""
    go = ["g", *str(step), "enter"]
    return [
        ("tui-slots.svg", [*go, "1"]),
        ("tui-pages.svg", [*go, "3", "down", "2"]),  # the pages of the second request marked
        ("tui-requests.svg", [*go, "3"]),
        ("tui-fault.svg", ["v", "5"]),
    ]


async def shot(app: InspectorApp, keys: list[str], name: str, out_dir: Path) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.5)
        await app.workers.wait_for_complete()
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.3)
            await app.workers.wait_for_complete()
        app.save_screenshot(name, str(out_dir))
    print(f"wrote {out_dir / name}")


async def shoot(recording: str, out_dir: Path) -> None:
    for name, keys in screens(busiest_step(load_recording(recording))):
        source = load_recording(recording)
        await shot(InspectorApp(source, checks=real_checks), keys, name, out_dir)


async def shoot_ranks(recording: str, out_dir: Path) -> None:
    """Rank 0 at the first step rank 1 differs, the ranks tab open on rank 1's row."""
    step = first_difference(load_recordings(recording))
    app = InspectorApp(RankSources(load_recordings(recording)), checks=real_checks)
    await shot(app, ["g", *str(step), "enter", "6", "down"], "tui-ranks.svg", out_dir)


if __name__ == "__main__":
    if sys.argv[1] == "--ranks":
        asyncio.run(shoot_ranks(sys.argv[2], Path(sys.argv[3])))
    else:
        asyncio.run(shoot(sys.argv[1], Path(sys.argv[2])))
