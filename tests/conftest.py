"""Every test (and every engine a test starts) keeps its engines' keys in a directory of its own
run, not in the user's runtime directory (mcinspect/auth.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("keys")
    path.chmod(0o700)
    before = os.environ.get("MCINSPECT_KEY_DIR")
    os.environ["MCINSPECT_KEY_DIR"] = str(path)  # inherited by the engines tests start
    yield str(path)
    if before is None:
        os.environ.pop("MCINSPECT_KEY_DIR", None)
    else:
        os.environ["MCINSPECT_KEY_DIR"] = before
