"""The hook table lives once (engine_hooks/hooks_0523.py): the README shows it as generated,
every target resolves in the installed sglang (0.5.23), and feature detection picks its
generation with nothing skipped."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()

from mcinspect_engine_hooks import hooks_0516, hooks_0523, hooks_mrc  # noqa: E402
from mcinspect_engine_hooks.events import EventSink, hook_points  # noqa: E402
from mcinspect_engine_hooks.generations import UNIFIED_TREE_CORE, Selection, resolve, resolves, select  # noqa: E402
from mcinspect_engine_hooks.guard import ErrorCounter  # noqa: E402
from mcinspect_engine_hooks.hooks_0523 import HOOKS, Hook, markdown  # noqa: E402
from mcinspect_engine_hooks.state_log import StateLog  # noqa: E402

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


RELEASE_0521 = {
    "absent": ("lock", "unlock", "checkpoint_into_tree", "_apply_eviction_result"),
    "added": ("cache_unfinished_req", "_free_values"),
}


def _as_release(monkeypatch, absent: tuple[str, ...], added: tuple[str, ...]) -> None:
    """This sglang, as a release whose UnifiedRadixCache lacks the `absent` methods and has the
    `added` ones (0.5.21's shape, 0.5.20's)."""
    from mcinspect_engine_hooks import generations

    real = generations.resolves

    def resolves(target: str) -> bool:
        method = target.rsplit(".", 1)[-1]
        return method not in absent and (method in added or real(target))

    monkeypatch.setattr(generations, "resolves", resolves)


def test_a_release_without_lock_unlock_and_checkpoint_into_tree_fits_through_their_fallbacks(monkeypatch) -> None:
    _as_release(monkeypatch, **RELEASE_0521)
    selection = select()
    assert isinstance(selection, Selection) and selection.skipped == ()
    used = {h.target.rsplit(".", 1)[-1]: h.body for h in selection.hooks}
    assert used["inc_lock_ref"] == "cache.locked" and used["dec_lock_ref"] == "cache.lock_ref_dropping"
    assert used["cache_unfinished_req"] == "cache.checkpoint" and used["_free_values"] == "cache.values_freed"
    assert not {"lock", "unlock", "checkpoint_into_tree"} & used.keys()


RELEASE_0520 = {
    "absent": RELEASE_0521["absent"] + ("claim_kv_row", "on_release"),
    "added": RELEASE_0521["added"] + ("cache_finished_req",),
}


def test_a_release_that_releases_requests_in_cache_finished_req_fits_through_it(monkeypatch) -> None:
    _as_release(monkeypatch, **RELEASE_0520)
    selection = select()
    assert isinstance(selection, Selection) and selection.generation is UNIFIED_TREE_CORE and selection.skipped == ()
    used = [(h.target.rsplit(".", 1)[-1], h.when, h.body) for h in selection.hooks]
    assert ("cache_finished_req", "before", "cache.releasing_row") in used
    assert ("cache_finished_req", "after", "cache.finished_cached") in used
    assert not {"claim_kv_row", "on_release"} & {name for name, _, _ in used}


def test_a_release_that_releases_requests_elsewhere_is_refused_naming_what_it_lacks(monkeypatch) -> None:
    _as_release(monkeypatch, RELEASE_0520["absent"], RELEASE_0521["added"])  # no release path at all
    selection = select()
    assert not isinstance(selection, Selection)
    assert "claim_kv_row" in selection.reason and "on_release" in selection.reason
    assert (
        "it reads 0.5.10, 0.5.11, 0.5.12, 0.5.13, 0.5.14, 0.5.15, 0.5.16, 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23"
        in selection.reason
    )


def test_a_release_whose_requests_keep_their_own_row_is_read_by_the_unified_generation(monkeypatch) -> None:
    """0.5.17-0.5.18's shape: ReqKvInfo has no req_pool_idx (the Req keeps it: req_kv reads it
    there) and no evict_for_alloc, which alone is skipped."""
    _as_release(monkeypatch, ("req_pool_idx", "evict_for_alloc"), ())
    selection = select()
    assert isinstance(selection, Selection) and selection.generation is UNIFIED_TREE_CORE
    assert [h.target.rsplit(".", 1)[-1] for h in selection.skipped] == ["evict_for_alloc"]
    assert "none lost on 0.5.17-0.5.18" in selection.skipped_line()


def test_the_hook_table_names_a_generation_this_release_was_passed_over_for(capsys) -> None:
    """A release where MambaRadixCache's methods fit and the unified generations do not: `mcinspect
    hooks` says the unified cache such a release builds is not read (the engine's log says so too)."""
    from mcinspect.cli_output import print_hooks

    assert select().passed_over == ()  # 0.5.23: the first generation fits
    lacking = "unified-tree-core (lacks its tree core)"
    print_hooks(dataclasses.replace(resolve(UNIFIED_TREE_CORE), passed_over=(lacking,)))
    printed = " ".join(capsys.readouterr().out.split())
    assert f"not read in this sglang: {lacking}; an engine whose scheduler builds" in printed


@pytest.mark.parametrize("hooks, marks", [(hooks_mrc.HOOKS, hooks_mrc.MARKS), (hooks_0516.HOOKS, hooks_0516.MARKS)], ids=["mrc", "0.5.16"])
def test_the_dirty_marks_are_on_only_with_every_one_of_their_rows(hooks: tuple[Hook, ...], marks: tuple[Hook, ...]) -> None:
    """A release missing one of MARKS' targets (its row skipped) gets walked captures, not
    marks that miss the changes that method makes (the caches that keep their own nodes)."""
    sink = EventSink()
    hook_points(sink, ErrorCounter(), StateLog(), hooks)
    assert sink.node_map_hooked
    for row in marks:
        sink = EventSink()
        hook_points(sink, ErrorCounter(), StateLog(), tuple(h for h in hooks if h != row))
        assert not sink.node_map_hooked, row.target
    assert not any(h in hooks_0523.HOOKS for h in marks)
