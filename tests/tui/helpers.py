"""Shared by the TUI tests: settle the app (ingest done), wait for a condition, press keys."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from textual.pilot import Pilot


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test on a fresh event loop (no pytest async plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def settle(pilot: Pilot, rounds: int = 50) -> None:
    """Wait until the workers have checked every frame (each rank's, then tp-agree across ranks,
    whose findings start more work) and the screen caught up."""
    for _ in range(rounds):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if all(worker.is_finished for worker in pilot.app.workers):
            return


async def pilot_until(pilot: Pilot, condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Let the app run until `condition` holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


def settle_then(*keys: str) -> Callable[[Pilot], Awaitable[None]]:
    """A snap_compare `run_before`: settle, press `keys`, settle again."""

    async def run(pilot: Pilot) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    return run
