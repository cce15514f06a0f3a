"""`mcinspect snapshot --format tree`: every node has a line or is counted in a '…' line, at any
depth and size, and the command prints it from a snapshot file or a recording."""

from __future__ import annotations

import io
import re
from array import array
from pathlib import Path

import msgspec
import pytest
from rich.console import Console
from typer.testing import CliRunner

from mcinspect.cli import app
from mcinspect.recording import RecordingWriter
from mcinspect.schema import SCHEMA_VERSION, CacheState, Counters, Delta, NodeId, Seq, Snapshot, Step
from mcinspect.tree_text import TextTree, build_tree, levels_for_width, plain_text, print_tree

from record_states import make_request, make_state, random_state, small_state
from tree_lines import TreeLines, parse_tree

runner = CliRunner()


def assert_accounts_for_every_node(state: CacheState, tree: TextTree, text: str, tokens: bool = True) -> TreeLines:
    """Node lines + the counts of the '…' lines = the tree, in nodes and (unless labels were
    cropped) in tokens."""
    lines = parse_tree(text)
    assert len(lines.ids) == len(set(lines.ids)) == tree.printed
    assert set(lines.ids) <= set(state.nodes)
    assert lines.folded == tree.folded == len(state.nodes) - tree.printed
    assert lines.footer == (tree.folded or None)
    if tokens:
        assert lines.tokens + lines.folded_tokens == sum(n.key_len for n in state.nodes.values())
    return lines


def line_of(text: str, node: int) -> str:
    return next(line for line in text.splitlines() if re.search(rf"#{node} \[", line))


def test_small_tree_shows_every_node_with_its_badges() -> None:
    state = small_state()
    tree = build_tree(state, flagged=[NodeId(2)])
    text = plain_text(tree)
    lines = assert_accounts_for_every_node(state, tree, text)
    assert sorted(lines.ids) == sorted(state.nodes) and tree.folded == 0
    assert "\x1b" not in text
    assert text.splitlines()[0] == "step 3: 6 nodes, 3 holding a mamba slot, 1 request, 1 node named by violations (!)"
    assert "#1 [16..32) S1 L1/1" in line_of(text, 1)
    assert "! #2 [32..48) S2 evictable" in line_of(text, 2)
    assert "#5 [16..32) evictable tombstone  16 17 18 19 20 21 …" in line_of(text, 5)
    assert "↳ #4 [48..64) S3 L1/1" in line_of(text, 4)  # 4 is 3's only child: same indentation
    on_path = {n for n in state.nodes if "← req-a" in line_of(text, n)}
    assert on_path == {0, 1, 3, 4}


@pytest.mark.parametrize("bias", [0.0, 0.6, 0.97])
@pytest.mark.parametrize(("max_nodes", "max_levels"), [(1, 32), (40, 3), (40, 32), (5_000, 2), (5_000, 32)])
def test_every_node_is_printed_or_counted(bias: float, max_nodes: int, max_levels: int) -> None:
    state = random_state(1_500, seed=int(bias * 10) + max_nodes, fanout_bias=bias)
    tree = build_tree(state, max_nodes=max_nodes, max_levels=max_levels)
    text = plain_text(tree)
    lines = assert_accounts_for_every_node(state, tree, text)
    if "deeper than" not in text:
        assert state.requests["r0"].last_node in lines.ids  # pinned, with its path
        assert tree.folded == 0 or max_nodes < len(state.nodes)


def test_20k_deep_chain_prints_without_recursion() -> None:
    n = 20_000
    parents = {0: -1, **{node: node - 1 for node in range(1, n)}}
    state = make_state(parents, key_len=1, slots={n - 1: 1}, requests=[make_request("deep", n - 1, 2, (3, 4))])
    folded = build_tree(state)
    text = plain_text(folded)
    lines = assert_accounts_for_every_node(state, folded, text)
    assert lines.ids == [0, n - 1] and f"… {n - 2:,} nodes in a chain #1..#{n - 2} [1..{n - 1})" in text
    whole = build_tree(state, max_nodes=n + 1)
    text = plain_text(whole)
    lines = assert_accounts_for_every_node(state, whole, text)
    assert lines.ids == list(range(n))
    assert max(len(line) - len(line.lstrip(" │├└─↳")) for line in text.splitlines()) <= 6  # one run, no nesting


def test_deep_branching_stops_nesting_at_max_levels() -> None:
    """A 20k-deep comb (each spine node has a leaf and the next spine node) cannot be flattened
    into runs: nesting stops at max_levels and what lies deeper is one counted line."""
    depth = 10_000
    parents = {0: -1, 1: 0, 2: 0}
    for level in range(1, depth):
        parents[2 * level + 1] = parents[2 * level + 2] = 2 * level - 1
    state = make_state(parents, key_len=1)
    tree = build_tree(state, max_nodes=100_000, max_levels=8)
    text = plain_text(tree)
    assert_accounts_for_every_node(state, tree, text)
    assert "deeper than 8 levels" in text
    assert max(len(line) - len(line.lstrip(" │├└─")) for line in text.splitlines()) <= 4 * 8


def test_narrow_terminal_drops_no_line() -> None:
    state = random_state(600, seed=3, fanout_bias=0.3)
    buffer = io.StringIO()
    tree = build_tree(state, max_nodes=300, max_levels=levels_for_width(60))
    print_tree(tree, Console(file=buffer, width=60, color_system=None))
    assert "subtrees deeper" in buffer.getvalue()  # past 5 levels (cropped at 60 columns)
    assert_accounts_for_every_node(state, tree, buffer.getvalue(), tokens=False)


def test_tree_of_a_real_sglang_cache() -> None:
    """sglang's own tree (splits, a tombstone, a lock), captured as the engine's hooks capture it."""
    from mcinspect_engine_hooks.cpu_engine import patches

    patches.install()  # before sglang is first imported
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    from sglang.test.kits.unified_radix_cache.unified_tree_core_inspector import UnifiedTreeCoreInspector

    from mcinspect_engine_hooks.capture import Capture
    from mcinspect_engine_hooks.events import EventSink, hook_points
    from mcinspect_engine_hooks.guard import ErrorCounter
    from mcinspect_engine_hooks.hooks_0523 import HOOKS
    from mcinspect_engine_hooks.state_log import StateLog

    import cpu_cache

    sink = EventSink()
    restore = cpu_cache.install_hooks(hook_points(sink, ErrorCounter(), StateLog(), HOOKS))
    try:
        scheduler = cpu_cache.build_cache(python_core_class=UnifiedTreeCoreInspector)  # lists node ids
        cache, pool = scheduler.tree_cache, scheduler.req_to_token_pool
        # [0, 16) with a state, then two branches below it, a split at 8 and an unrelated leaf
        # (the newest node); the LRU mamba eviction then tombstones [8, 16).
        for tokens in ([*range(16)], [*range(32)], [*range(16), *[7] * 16], [*range(8), *[9] * 8], [*range(100, 116)]):
            value = scheduler.token_to_kv_pool_allocator.alloc(len(tokens))
            cache.insert(InsertParams(key=RadixKey(array("q", tokens)), value=value, mamba_value=pool.mamba_allocator.alloc(1)))
        cache.evict(EvictParams(num_tokens=0, mamba_num=1))
        leaf = max(cache.tree_core.get_all_node_ids())
        lock = cache.lock(leaf)
        state = Capture(scheduler, sink).full_state(Step(1))
        cache.unlock(lock)
    finally:
        restore()
    tree = build_tree(state)
    text = plain_text(tree)
    lines = assert_accounts_for_every_node(state, tree, text)
    assert sorted(lines.ids) == sorted(cache.tree_core.get_all_node_ids())
    tombstones = [n.id for n in state.nodes.values() if n.tombstone]
    assert len(tombstones) == 1 and "tombstone" in line_of(text, tombstones[0])
    assert " L1/1 " in line_of(text, leaf)
    assert all(f" S{n.mamba_slot} " in line_of(text, n.id) for n in state.nodes.values() if n.mamba_slot >= 0)


# --- the command ----------------------------------------------------------------------------


def snapshot_file(tmp_path: Path, state: CacheState) -> Path:
    path = tmp_path / "snap.json"
    path.write_bytes(msgspec.json.encode(Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(0), state=state, counters=Counters())))
    return path


def test_cli_prints_the_tree_of_a_snapshot_file(tmp_path: Path) -> None:
    state = random_state(300, seed=1, fanout_bias=0.8)
    path = snapshot_file(tmp_path, state)
    result = runner.invoke(app, ["snapshot", str(path), "--format", "tree", "--max-nodes", "30"])
    assert result.exit_code == 0, result.output
    lines = parse_tree(result.stdout)
    assert len(lines.ids) + lines.folded == len(state.nodes) and lines.footer == lines.folded > 0

    out = tmp_path / "tree.txt"
    result = runner.invoke(app, ["snapshot", str(path), "--format", "tree", "--max-nodes", "1000", "-o", str(out)])
    assert result.exit_code == 0, result.output
    written = out.read_text()
    assert "\x1b" not in written and sorted(parse_tree(written).ids) == sorted(state.nodes)
    assert f"wrote {out}: 300 node lines, 0 nodes folded, from {path}" in " ".join(result.stderr.split())


def test_cli_prints_the_last_step_of_a_recording(tmp_path: Path) -> None:
    first = small_state()
    path = tmp_path / "run.mcrec"
    with RecordingWriter(path, None) as writer:
        writer.write(Snapshot(schema_version=SCHEMA_VERSION, seq=Seq(0), state=first, counters=Counters()))
        writer.write(Delta(
            schema_version=SCHEMA_VERSION, seq=Seq(1), step=Step(4), upsert_nodes=[], removed_nodes=[NodeId(5)], slots={},
            upsert_requests=[], removed_requests=[], kv=None, events=[], counters=Counters(),
        ))  # fmt: skip
    result = runner.invoke(app, ["snapshot", str(path), "--format", "tree"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("step 4: 5 nodes") and sorted(parse_tree(result.stdout).ids) == [0, 1, 2, 3, 4]
