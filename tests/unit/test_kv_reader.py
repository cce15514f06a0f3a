"""KvReader on sglang 0.5.23's real paged KV allocator (CPU): a decode step that takes no page
rebinds `free_pages` to a view of the same pages, which is no change; an alloc or a free is."""

from __future__ import annotations

from mcinspect_engine_hooks.cpu_engine import patches

patches.install()  # before the first sglang import

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from mcinspect.schema import from_runs  # noqa: E402
from mcinspect_engine_hooks.pools_0523 import KvReader  # noqa: E402

from cpu_cache import build_cache  # noqa: E402


def _free_tokens(reader: KvReader) -> list[int]:
    return from_runs(reader.read().free_runs)


def test_a_rebound_view_of_the_same_pages_is_no_change_and_an_alloc_or_free_is() -> None:
    allocator = build_cache(page_size=16, kv_size=256).token_to_kv_pool_allocator
    reader = KvReader(allocator)
    before = _free_tokens(reader)
    assert not reader.changed()

    allocator.free_pages = allocator.free_pages[0:]  # what alloc_decode does when no row needs a page
    assert not reader.changed()

    taken = allocator.alloc(32)  # two pages
    assert reader.changed()
    after_alloc = _free_tokens(reader)
    assert set(before) - set(after_alloc) == set(taken.tolist())
    assert not reader.changed()

    allocator.free(taken)
    assert reader.changed()
    assert sorted(_free_tokens(reader)) == sorted(before)
