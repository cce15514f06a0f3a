"""What the CLI makes of the live engine (the `live` fixture, idle after its workload): the
tree as text, the Graphviz render, the recording `mcinspect record` took during the workload,
and a diff between two snapshots set against the events recorded between them."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcinspect.diff import diff_states
from mcinspect.recording import Frame, RecordingReader
from mcinspect.render import DotNotFound, find_dot
from mcinspect.schema import (
    CacheState,
    Delta,
    Event,
    EvictEvent,
    InsertEvent,
    LockEvent,
    NodeId,
    RequestEvent,
    SlotEvent,
    Snapshot,
    apply_delta,
    copy_state,
)

from engine_runs import MCINSPECT
from live_demo import LiveDemo, snapshot_of
from tree_lines import parse_tree

pytestmark = pytest.mark.slow

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"
BOX_TOTALS = re.compile(r"([\d,]+) nodes, ([\d,]+) tokens, ([\d,]+) mamba slots, ([\d,]+) locked")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([MCINSPECT, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_tree_text_of_the_live_engine(live: LiveDemo) -> None:
    state = snapshot_of(live.target).state
    port = str(live.target.port)
    whole = parse_tree(cli("snapshot", port, "--format", "tree").stdout)
    assert sorted(whole.ids) == sorted(state.nodes) and whole.folded == 0 and whole.footer is None
    folded_text = cli("snapshot", port, "--format", "tree", "--max-nodes", "5").stdout
    folded = parse_tree(folded_text)
    assert folded_text.startswith(f"step {state.step}: {len(state.nodes)} nodes")
    assert len(folded.ids) + folded.folded == len(state.nodes) and folded.footer == folded.folded > 0
    assert folded.tokens + folded.folded_tokens == whole.tokens == sum(n.key_len for n in state.nodes.values())


def subtree(state: CacheState, tops: set[NodeId]) -> set[NodeId]:
    """`tops` and every node below them."""
    return {n for n in state.nodes if any(walk in tops for walk in path_up(state, n))}


def path_up(state: CacheState, node: NodeId) -> list[NodeId]:
    path = []
    while node in state.nodes and node not in path:
        path.append(node)
        node = state.nodes[node].parent
    return path


def test_rendered_svg_accounts_for_every_node(live: LiveDemo, tmp_path: Path) -> None:
    try:
        find_dot()
    except DotNotFound as exc:
        pytest.skip(f"no Graphviz binary ({exc})")
    state = snapshot_of(live.target).state
    nodes = state.nodes.values()
    expected = (len(state.nodes), sum(n.key_len for n in nodes), sum(n.mamba_slot >= 0 for n in nodes),
                sum(bool(n.full_lock or n.mamba_lock) for n in nodes))  # fmt: skip
    for max_nodes in (500, 10):
        svg = tmp_path / f"tree-{max_nodes}.svg"
        cli("render", str(live.target.port), "-o", str(svg), "--max-nodes", str(max_nodes))
        groups = {g.get("id", ""): g for g in ET.parse(svg).getroot().iter(f"{SVG}g")}
        drawn = {NodeId(int(i.removeprefix("node-"))) for i in groups if i.startswith("node-")}
        assert drawn <= set(state.nodes)
        totals = [len(drawn), sum(state.nodes[n].key_len for n in drawn), sum(state.nodes[n].mamba_slot >= 0 for n in drawn),
                  sum(bool(state.nodes[n].full_lock or state.nodes[n].mamba_lock) for n in drawn)]  # fmt: skip
        accounted = set(drawn)
        for box, group in groups.items():
            if not box.startswith(("chain-", "fold-")):
                continue
            title = next(a.get(XLINK_TITLE, "") for a in group.iter(f"{SVG}a"))
            listed, counts = title.split("\n")
            ids = {NodeId(int(i)) for i in re.findall(r"#(\d+)", listed)}
            accounted |= ids if box.startswith("chain-") else subtree(state, ids)
            found = BOX_TOTALS.match(counts)
            assert found, title
            totals = [t + int(c.replace(",", "")) for t, c in zip(totals, found.groups())]
        assert accounted == set(state.nodes)
        assert tuple(totals) == expected
        if max_nodes == 500:
            assert drawn == set(state.nodes)
        else:
            assert len(drawn) < len(state.nodes)  # it folded


@dataclass
class Recorded:
    frames: list[Frame]
    final: Snapshot
    """A snapshot of the idle engine, taken before the recorder stopped."""


@pytest.fixture(scope="module")
def recorded(live: LiveDemo) -> Recorded:
    """The recording, once the recorder has the last step and was stopped with Ctrl-C."""
    final = snapshot_of(live.target)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the file is readable while it grows
        frames = list(RecordingReader(live.recording))
        if frames and frames[-1].seq >= final.seq:
            break
        time.sleep(0.5)
    live.recorder.send_signal(signal.SIGINT)
    _, stderr = live.recorder.communicate(timeout=30)
    assert live.recorder.returncode == 130 and stderr.strip().splitlines()[-1] == "stopped", stderr  # Ctrl-C's code
    reader = RecordingReader(live.recording)
    frames = list(reader)
    assert not reader.truncated and not reader.warnings, reader.warnings
    return Recorded(frames, final)


def test_recording_ends_in_the_live_state(recorded: Recorded) -> None:
    frames, final = recorded.frames, recorded.final
    assert frames[-1].seq == final.seq
    state = copy_state(frames[0].state)
    for frame in frames[1:]:
        if isinstance(frame, Snapshot):
            state = copy_state(frame.state)
        else:
            apply_delta(state, frame)
    assert state == final.state
    steps = [f.step for f in frames if isinstance(f, Delta)]
    finished = [e for f in frames if isinstance(f, Delta) for e in f.events if isinstance(e, RequestEvent) and e.what == "finish"]
    assert len(steps) > 50 and len(finished) > 50  # it recorded the workload, not the idle engine


def test_diff_of_two_snapshots_matches_the_events_between_them(recorded: Recorded) -> None:
    """From the recording's last Snapshot frame (a resync replaces the state) to the final live
    snapshot, and from every 25th state after it: what the diff names is what the events say."""
    start = max(i for i, f in enumerate(recorded.frames) if isinstance(f, Snapshot))
    deltas = [f for f in recorded.frames[start + 1 :] if isinstance(f, Delta)]
    assert len(deltas) > 50
    state = copy_state(recorded.frames[start].state)
    seen: dict[str, int] = {}
    for index, delta in enumerate(deltas):
        if index % 25 == 0:
            later = [e for d in deltas[index:] for e in d.events]
            for kind, count in diff_matches_events(state, recorded.final.state, later).items():
                seen[kind] = seen.get(kind, 0) + count
        apply_delta(state, delta)
    assert all(seen.get(kind, 0) > 0 for kind in ("evicted", "added with a slot", "slot owners", "locks")), seen


def diff_matches_events(a: CacheState, b: CacheState, events: list[Event]) -> dict[str, int]:
    """Assert what `diff_states(a, b)` names against `events` (those from a to b); returns how
    many items of each kind were checked."""
    diff = diff_states(a, b)
    evicted = {n for e in events if isinstance(e, EvictEvent) for n in e.nodes}
    inserted = {(e.node, e.slot) for e in events if isinstance(e, InsertEvent)}
    slots_named = {s for e in events if isinstance(e, (SlotEvent, EvictEvent)) for s in e.slots}
    slots_named |= {e.slot for e in events if isinstance(e, InsertEvent)}
    locked_paths = {n for e in events if isinstance(e, LockEvent) for n in [*path_up(a, e.node), *path_up(b, e.node)]}
    finished = {e.rid for e in events if isinstance(e, RequestEvent) and e.what == "finish"}

    assert set(diff.nodes_evicted) <= evicted  # a node leaves the tree only by eviction
    assert set(diff.nodes_tombstoned) <= evicted
    with_slot = [n for n in diff.nodes_added if b.nodes[n].mamba_slot >= 0]
    assert all((n, b.nodes[n].mamba_slot) in inserted for n in with_slot)  # a state enters by an insert
    changes = {c.slot: c for c in diff.slot_owner_changes}
    assert set(changes) <= slots_named
    for n in with_slot:  # and its slot changed owner, to the node
        assert [str(owner) for owner in changes[b.nodes[n].mamba_slot].after] == [f"tree #{n}"]
    assert {c.node for c in diff.lock_changes} <= locked_paths
    assert set(diff.requests_removed) <= finished
    # Conversely: a node of `a` named by an eviction, and not given a state again by a later
    # insert, is gone or lost a component in `b`.
    last_evicted = {n: i for i, e in enumerate(events) if isinstance(e, EvictEvent) for n in e.nodes}
    last_inserted = {e.node: i for i, e in enumerate(events) if isinstance(e, InsertEvent)}
    for n, when in last_evicted.items():
        if n in a.nodes and last_inserted.get(n, -1) < when:
            assert n in diff.nodes_evicted or b.nodes[n].tombstone or b.nodes[n].kv_evicted, n
    return {
        "evicted": len(diff.nodes_evicted) + len(diff.nodes_tombstoned),
        "added with a slot": len(with_slot),
        "slot owners": len(changes),
        "locks": len(diff.lock_changes),
    }
