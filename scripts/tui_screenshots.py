"""Write SVG screenshots of the TUI's main screens, replaying a recording (used by
scripts/make-screenshots.sh; the recording comes from the real embedded engine)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mcinspect.tui import InspectorApp, ReplaySource, load_recording, real_checks

SIZE = (160, 45)


def busiest_step(source: ReplaySource) -> int:
    """The last step with the most requests held: the slot, page and request screens show it."""
    frames = source.frames()
    return max(frames, key=lambda f: (len(source.state_at(f.index).requests), f.index)).step


def screens(step: int) -> list[tuple[str, list[str]]]:
    """(file name, keys pressed before the shot)."""
    go = ["g", *str(step), "enter"]
    return [
        ("tui-slots.svg", [*go, "1"]),
        ("tui-pages.svg", [*go, "3", "down", "2"]),  # the pages of the second request marked
        ("tui-requests.svg", [*go, "3"]),
        ("tui-fault.svg", ["v", "5"]),
    ]


async def shoot(recording: str, out_dir: Path) -> None:
    for name, keys in screens(busiest_step(load_recording(recording))):
        source = load_recording(recording)
        app = InspectorApp(source, checks=real_checks)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.5)
            await app.workers.wait_for_complete()
            for key in keys:
                await pilot.press(key)
                await pilot.pause(0.3)
            app.save_screenshot(name, str(out_dir))
        print(f"wrote {out_dir / name}")


if __name__ == "__main__":
    asyncio.run(shoot(sys.argv[1], Path(sys.argv[2])))
