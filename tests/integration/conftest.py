"""The live demo engine, started once for every test of this folder that reads it and stopped
after the folder's last test (package scope: tests/integration is a package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from live_demo import LiveDemo, run_live_demo


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDemo]:
    yield from run_live_demo(tmp_path_factory.mktemp("live"))
