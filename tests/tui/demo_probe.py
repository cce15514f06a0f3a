"""What `mcinspect demo` does in a terminal, with a pilot at the keyboard (run by
test_demo_tui.py in a fresh interpreter, so that sglang and the engine's CPU patches stay out of
the test process).

`python demo_probe.py PORT [TP]`: start the embedded engine and its workload as `mcinspect demo`
does (`run_demo_in_background`), open the app `mcinspect demo` opens (`attach_app`) with
`run_test`, wait until it follows the engine, look at the requests tab, quit with `q`, shut down.
With TP ranks (`demo --tp TP`, every step captured) it also waits for every rank, pauses, shows
the next rank (R) and the ranks tab. The last line of stdout is a JSON object of what the TUI showed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from mcinspect.demo import run_demo_in_background
from mcinspect.target import Target
from mcinspect.tui import InspectorApp, attach_app
from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

REQUESTS = 12
CONNECT_S = 120.0


async def drive(app: InspectorApp, ranks: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with app.run_test(size=(160, 45)) as pilot:
        deadline = time.monotonic() + CONNECT_S
        requests_seen = 0
        while time.monotonic() < deadline:
            await pilot.pause(0.2)
            if app.view is not None:
                requests_seen = max(requests_seen, len(app.view.state.requests))
            every_rank = len(app.ranks.views) == ranks and all(len(view.frames) > 1 for view in app.ranks.views)
            if (
                app.view is not None
                and app.view.state.step > 0
                and requests_seen
                and app.source.health().status == "connected"
                and every_rank
            ):
                break
        if ranks > 1:
            seen["ranks"] = await _ranks(pilot, app)
        await pilot.press("3")
        await pilot.pause(0.3)
        view = app.view
        seen |= {
            "header": str(app.query_one("#header").render()),
            "status": app.source.health().status,
            "step": None if view is None else view.state.step,
            "frames": len(app.source.frames()),
            "requests_seen": requests_seen,
            "following": app.following,
            "tab": app.query_one("#tabs").active,
        }
        await pilot.press("q")
        await pilot.pause()
        seen["running_after_q"] = app.is_running
    return seen


async def _ranks(pilot: Any, app: InspectorApp) -> dict[str, Any]:
    """Pause, show the next rank at the same step, then the ranks tab."""
    await pilot.press("p")
    await pilot.pause(0.3)
    step = app.view.state.step
    await pilot.press("R")
    await pilot.pause(0.3)
    after = {"rank": app.rank, "step": app.view.state.step, "header": str(app.query_one("#header").render())}
    await pilot.press("6")
    deadline = time.monotonic() + 10
    while (app._summary is None or app._summary.step != step) and time.monotonic() < deadline:
        await pilot.pause(0.2)
    summary = app._summary
    verdicts = [row.verdict for row in summary.rows] if summary is not None else []
    return {"count": len(app.ranks.views), "paused_at": step, "after_R": after, "verdicts": verdicts}


def main(port: int, tp: int) -> None:
    with run_demo_in_background(EmbeddedEngineConfig(inspector_port=port, tp_size=tp), REQUESTS):
        seen = asyncio.run(drive(attach_app((Target("127.0.0.1", port),), token="", every_step=tp > 1), tp))
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
