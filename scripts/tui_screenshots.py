"""Write SVG screenshots of the TUI's main screens, replaying a recording (used by
scripts/make-screenshots.sh; the recording comes from the real embedded engine)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from mcinspect.tui import InspectorApp, checks_checker, load_recording

SIZE = (160, 45)
SCREENS = [
    # (file name, keys pressed before the shot)
    ("tui-slots.svg", ["G", "1"]),
    ("tui-pages.svg", ["G", "2"]),
    ("tui-requests.svg", ["G", "3"]),
    ("tui-fault.svg", ["v", "5"]),
]


async def shoot(recording: str, out_dir: Path) -> None:
    for name, keys in SCREENS:
        source = load_recording(recording)
        app = InspectorApp(source, checker=checks_checker(source.engine))
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
