"""The hook table lives once (engine_hooks/hooks_0523.py): the README shows it as generated,
every target resolves in the installed sglang (0.5.23), and feature detection picks its
generation with nothing skipped."""

from __future__ import annotations

from pathlib import Path

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()

from mcinspect_engine_hooks.generations import UNIFIED_TREE_CORE, Selection, resolves, select  # noqa: E402
from mcinspect_engine_hooks.hooks_0523 import HOOKS, markdown  # noqa: E402

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_shows_the_generated_table() -> None:
    text = README.read_text().split("<!-- hook-table -->\n", 1)[1]
    shown = text[: text.index("\n\n") + 1]
    assert shown == markdown()


def test_every_target_resolves_in_the_installed_sglang() -> None:
    assert [h.target for h in HOOKS if not resolves(h.target)] == []
    assert not resolves("mem_cache.unified_radix_cache.UnifiedRadixCache.no_such_method")
    assert not resolves("no_such_module.Thing.method")


def test_feature_detection_picks_the_generation_with_nothing_skipped() -> None:
    selection = select()
    assert isinstance(selection, Selection)
    assert selection.generation is UNIFIED_TREE_CORE
    assert selection.skipped == () and selection.skipped_line() == ""
    assert selection.hooks == HOOKS  # 0.5.23 has every primary target: no fallback used
