"""Other sglang releases, each from its real wheel in its own venv (scripts/setup-release-venv.sh,
what `make demo SGLANG=X` runs): a supported one runs the same embedded-engine demo with every
hook body working, reads clean (T2 included) and catches faults of different mechanisms; an
unsupported one (0.5.9, whose own CPU path asserts AMX) says why in its engine's log and leaves
the engine alone.

CI runs 0.5.22's own mixed-chunk bug caught and 0.5.15's demo read clean (one release of each
older generation: CI's time budget), and the unit tests of 0.5.15's real MambaRadixCache class
and of 0.5.16's real UnifiedRadixCache;
MCINSPECT_RELEASE_MATRIX=1
adds its clean demo, 0.5.21, 0.5.20, 0.5.19, 0.5.18, 0.5.17 and 0.5.16 (the same two), the whole fault library per release
(less the faults a release has for real), 0.5.19's, 0.5.18's, 0.5.17's, 0.5.16's and 0.5.15's own #37836 caught, 0.5.10-0.5.14, and the unsupported release (tests/unit/test_unsupported_release.py covers its inspector port in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fault_runs import CASES, DETECTION_STEPS, VERIFY_ENV, assert_fault_caught, record_and_check

from mcinspect_engine_hooks.cpu_engine.faults import FAULTS
from mcinspect_engine_hooks.cpu_engine.faults.base import LOG_ENV
from mcinspect_engine_hooks.families import DEFAULT_FAMILY

from engine_runs import free_port_pair, opt_in

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("0.5.22", "0.5.21", "0.5.20", "0.5.19", "0.5.18", "0.5.17", "0.5.16")
"""The supported releases of the unified generations besides the main venv's 0.5.23 (engine_hooks/generations.py)."""
GENERATION = {"0.5.16": "unified-tree-0516"}
"""The generation a release selects where it is not unified-tree-core."""
SKIPPED = {release: ["mem_cache.unified_radix_cache.UnifiedRadixCache.evict_for_alloc"] for release in ("0.5.18", "0.5.17")}
SKIPPED["0.5.16"] = ["layers.attention.hybrid_linear_attn_backend.track_mamba_states_all_layers"]
"""Hooks a release lacks, fallback included (0.5.17-0.5.18 evict at allocation through `evict`,
hooked; 0.5.16 has no all-layers decode track copy)."""
IN_CI = ("0.5.22",)
"""The release CI runs, for its mixed-chunk bug caught on the unpatched engine (CI's time
budget); MCINSPECT_RELEASE_MATRIX=1 runs every test on every release."""
UNSUPPORTED = "0.5.9"
"""The newest release mcinspect does not read: reached by the import-time stand-in (no
`sglang.srt.plugins`), but its feature detection meets 0.5.9's own CPU assertion (hybrid linear
attention asks for AMX at import), so the plugin says so and leaves the engine alone; the
engine's model load then raises the same assertion itself."""
MATRIX_ENV = "MCINSPECT_RELEASE_MATRIX"
SANITY_STOPS = {(release, "ghost-node"): "Sanity check FAILED" for release in ("0.5.18", "0.5.17")}
"""Faults whose effect sglang's own check stops the engine on, on that release, with that message:
0.5.17-0.5.18's tree sanity check (run when the scheduler idles) finds the ghost in the mamba LRU
and not in the tree, and raises. The recording made until then is checked: mcinspect caught it first."""
NO_MECHANISM = {
    ("0.5.16", "ghost-node"): "0.5.16 has no tree core to stamp the ghost root through (the fault re-creates "
    "checkpoint_into_tree's empty insert of 0.5.19 on)",
}
"""Faults whose mechanism a release does not have."""


def fault_cases() -> list[tuple[str, str, str, int]]:
    if os.environ.get(MATRIX_ENV) != "1":
        return []
    # mixed-track-dropped re-creates a bug 0.5.22 has for real: there it is the test below
    return [case for case in CASES if case[0] in FAULTS and case[0] != "mixed-track-dropped"]


def venv_of(release: str) -> Path:
    """The release's venv, set up once (seconds: its wheel over .venv's CPU stack)."""
    done = subprocess.run(["bash", "scripts/setup-release-venv.sh", release], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return ROOT / done.stdout.strip().splitlines()[-1]


def _release_param(release: str, in_ci: Sequence[str] | str = IN_CI) -> Any:
    opt_in = release not in in_ci and os.environ.get(MATRIX_ENV) != "1"
    return pytest.param(release, marks=[pytest.mark.skip(reason=f"CI's time budget: {MATRIX_ENV}=1 runs it")] if opt_in else [])


@pytest.fixture(scope="module", params=[_release_param(r) for r in RELEASES])
def release(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(release, its venv's mcinspect)."""
    return request.param, str(venv_of(request.param) / "bin" / "mcinspect")


def test_the_demo_reads_the_release_clean(release: tuple[str, str], tmp_path: Path) -> None:
    version, mcinspect = release
    if os.environ.get(MATRIX_ENV) != "1":  # CI: 0.5.23's runs are read clean (test_embedded_engine)
        pytest.skip(f"CI's time budget: {MATRIX_ENV}=1 runs it")
    found, summary = record_and_check(tmp_path, env={**os.environ, **VERIFY_ENV}, requests=40, mcinspect=mcinspect)
    engine, stats = summary["engine"], summary["stats"]
    assert engine["sglang_version"] == version and engine["hooks_generation"] == GENERATION.get(version, "unified-tree-core")
    assert engine["hooks_skipped"] == SKIPPED.get(version, [])  # every other hook, or its fallback, exists
    assert stats["hook_errors"] == 0 and stats["counters"]["unobserved_steps"] == 0
    assert stats["evicted_mamba_slots"] > 0 and summary["cached_tokens"] > 0
    verify = stats["verify"]
    assert verify["verified"] > 0 and verify["working"] > 0 and verify["mismatches"] == 0
    assert found == []


@pytest.mark.parametrize("fault, model, strategy, page_size", fault_cases())
def test_a_fault_is_caught_on_the_release(
    release: tuple[str, str], fault: str, model: str, strategy: str, page_size: int, tmp_path: Path
) -> None:
    if real := FAULTS[fault].real_in(release[0]):
        pytest.skip(real)
    if why := NO_MECHANISM.get((release[0], fault)):
        pytest.skip(why)
    stopped_by = SANITY_STOPS.get((release[0], fault), "")
    assert_fault_caught(tmp_path, fault, model, strategy, page_size, mcinspect=release[1], stopped_by=stopped_by)


def test_the_real_mixed_chunk_bug_of_the_release_is_caught_on_the_unpatched_engine(release: tuple[str, str], tmp_path: Path) -> None:
    """0.5.17-0.5.22's mix_with_running -> merge_batch drop the prefill rows' track fields
    (#24613, recurred as #39342; 0.5.23 carries them across the merge): the mixed forward never
    writes the slot that is donated. No fault injected: the release's own code path."""
    version, mcinspect = release
    if version != IN_CI[0] and os.environ.get(MATRIX_ENV) != "1":
        pytest.skip(f"CI's time budget: {MATRIX_ENV}=1 runs it")
    found, summary = record_and_check(
        tmp_path, "--mixed-chunk", "--page-size", "1", env={**os.environ, **VERIFY_ENV}, requests=40, mcinspect=mcinspect
    )
    assert summary["stats"]["paths"]["mixed batch"] > 0 and summary["stats"]["hook_errors"] == 0
    assert summary["stats"]["verify"]["mismatches"] > 0  # the cached and working states are wrong
    checks = {v["check"] for v in found}
    verify, firsts = summary["stats"]["verify"], {c: min(v["step"] for v in found if v["check"] == c) for c in checks}
    print(
        f"mixed chunk on {version}: {summary['stats']['paths']['mixed batch']} mixed batches, T2 {verify['mismatches']} mismatches in {verify['verified']} cached + {verify['working']} working states; first steps {firsts}"
    )
    assert {"write-ran", "T2-recompute"} <= checks, checks
    first_unwritten = min(v["step"] for v in found if v["check"] == "write-ran")
    assert min(v["step"] for v in found) == first_unwritten  # the metadata check sees it first, at the step


REAL_37836 = ("0.5.19", "0.5.18", "0.5.17", "0.5.16", "0.5.15")
"""The supported releases with #37836 for real (fixed in 0.5.20): their Mamba2 prefill tracking reads
the chunk states per request from Mamba2's one flat grid (0.5.15: the MambaRadixCache generation,
the same `_init_track_ssm_indices`)."""


@opt_in(MATRIX_ENV)
@pytest.mark.parametrize("version", REAL_37836)
def test_the_real_37836_of_the_release_is_caught_on_the_unpatched_engine(version: str, tmp_path: Path) -> None:
    """No fault injected: the release's own Mamba2 track plan caches states of the wrong chunk boundary,
    and T2 (the recompute of a cached state, and the working states it samples) says so."""
    mcinspect = str(venv_of(version) / "bin" / "mcinspect")
    found, summary = record_and_check(tmp_path, "--model", "nemotron-h", env={**os.environ, **VERIFY_ENV}, requests=40, mcinspect=mcinspect)
    assert summary["engine"]["sglang_version"] == version and summary["stats"]["hook_errors"] == 0
    assert summary["stats"]["verify"]["mismatches"] > 0
    checks = {v["check"] for v in found}
    verify = summary["stats"]["verify"]
    print(
        f"#37836 on {version}: T2 {verify['mismatches']} mismatches in {verify['verified']} cached + {verify['working']} working states; {len(found)} violations, first at step {min(v['step'] for v in found)}"
    )
    assert "T2-recompute" in checks, checks
    assert checks <= {"T2-recompute", "T2-working-state"}, checks  # the states are wrong, the bookkeeping right


@opt_in(MATRIX_ENV)
def test_an_unsupported_release_says_why_in_the_engine_log_and_leaves_it_alone(tmp_path: Path) -> None:
    """A release with the plugin hooks that no generation fits says so from its engine's log and
    inspector port (tests/unit/test_unsupported_release.py covers the port); every release from
    0.5.10 is read now, so this is 0.5.9: one line from each engine process, no hook of mcinspect
    failing, and the engine stopped by its own assertion, not by mcinspect."""
    mcinspect = str(venv_of(UNSUPPORTED) / "bin" / "mcinspect")
    port = free_port_pair()
    demo = subprocess.run(
        [mcinspect, "demo", "--headless", "--requests", "4", "--strategy", "no_buffer", "--page-size", "1", "--port", str(port)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert demo.returncode == 2, demo.stderr[-3000:]
    said = [line for line in demo.stderr.splitlines() if "mcinspect:" in line and "the hooks stay off" in line]
    assert said and all("AMX" in line for line in said), demo.stderr[-3000:]
    assert "mcinspect hook" not in demo.stderr  # no hook body failed (guard.py's message)
    assert "AssertionError: CPU requires AMX" in demo.stderr  # sglang's own, at its model load


MRC_RELEASES = ("0.5.15", "0.5.14", "0.5.13")
"""The MambaRadixCache releases the embedded engine runs on (generation mamba-radix-cache): their
clean read runs T2 with the engine oracle, as the unified generations' (the faults and the
oldest releases with the transformers oracle)."""
MRC_RELEASE = MRC_RELEASES[0]
STAGED_COW_KEPT = ("0.5.13", "0.5.14")
"""Releases whose scheduler keeps a request's staged copy-on-write source when admission rejects
it (it stays queued, its source node unlocked, until it is admitted): check cow-source names it
once in the demo. 0.5.15 clears it (scheduler.py, `_get_new_batch_prefill_raw`: "init_next_round_input()
may stage deferred Mamba COW/clear metadata before add_one_req() rejects the request")."""
OLDEST_MRC = ("0.5.12", "0.5.11", "0.5.10")
"""Selected with four rows missing (no admission groups, no deferred copy-on-write: a hit's
state is copied at the match, so no T3 and no copy-on-write path count). 0.5.10 has no
`sglang.srt.plugins`: its hooks are applied at import (engine_hooks/registry.py)."""
FORK_RELEASE_FAULTS = [
    # fault, strategy, page size, check, --verify, steps it may take. No extra_buffer_lazy and no
    # donation method (double-owner, overwrite-cached have no mechanism), no deferred copy-on-write
    # (dropped-cow neither).
    ("leak-slot", "extra_buffer", 16, "slot-partition", "off", 0),
    ("unwritten-slot", "extra_buffer", 16, "T2-recompute", "transformers", 0),
    # a chunk checkpoint inserts a fork (a fresh slot, no ping-pong index), so state-depth and
    # write-ran hold a state to its plan only at the first finish donation (step 28, 27 after)
    ("unwritten-slot", "extra_buffer", 16, "write-ran", "off", 30),
    ("track-off-by-one", "extra_buffer", 1, "state-depth", "off", 30),
    ("depth-mismatch", "extra_buffer", 16, "state-depth", "off", 30),
    ("decode-write-to-padding", "extra_buffer", 16, "write-ran", "off", 0),
    ("stray-track-write", "extra_buffer", 1, "write-target", "off", 0),
    ("wrong-chunk-state", "extra_buffer", 16, "T2-recompute", "transformers", DETECTION_STEPS),
    ("zero-initial-state", "extra_buffer", 16, "T2-recompute", "transformers", DETECTION_STEPS),
]
"""The fault rows of each of OLDEST_MRC (0.5.10: its hooks and the faults' applied by registry.py's
stand-in, no HookRegistry)."""
DEFERRED_COW_MRC = ("0.5.15", "0.5.14", "0.5.13")
"""The MambaRadixCache releases with a deferred copy-on-write (no fork at the chunk checkpoint)."""
DEFERRED_COW_FAULTS = [
    # fault, strategy, page size, the check that catches it, --verify, steps it may take
    ("leak-slot", "extra_buffer_lazy", 16, "slot-partition", "off", 0),
    ("double-owner", "extra_buffer", 1, "slot-partition", "off", 0),
    ("overwrite-cached", "extra_buffer", 16, "request-slots", "off", 0),
    # the write hooks (hooks_mrc's write rows) see what the forward ran, at its step (0.5.13 hands
    # the decode copy the batch's indices, which the fault zeroes: the same write rows)
    ("unwritten-slot", "extra_buffer_lazy", 16, "write-ran", "off", 0),
    ("decode-write-to-padding", "extra_buffer_lazy", 16, "write-ran", "off", 0),
    ("stray-track-write", "extra_buffer", 1, "write-target", "off", 0),
    # the key length moved a page from the tracked state's (MambaRadixCache's two caching calls)
    ("track-off-by-one", "extra_buffer", 1, "state-depth", "off", 0),
    ("depth-mismatch", "extra_buffer", 16, "state-depth", "off", 0),
    ("dropped-cow", "extra_buffer", 16, "cow-ran", "off", 0),  # 0.5.13: its copy-on-write runs in the backend
    # T2 reads a state when the transformers oracle gets to it: fault_runs' allowance for T2
    ("wrong-chunk-state", "extra_buffer", 16, "T2-recompute", "transformers", DETECTION_STEPS),
    ("zero-initial-state", "extra_buffer", 16, "T2-recompute", "transformers", DETECTION_STEPS),
]
"""The fault rows of each of DEFERRED_COW_MRC."""
MRC_FAULTS = [
    # release, fault, strategy, page size, the check that catches it, --verify, steps it may take
    *((release, *row) for release in DEFERRED_COW_MRC for row in DEFERRED_COW_FAULTS),
    # unwritten-slot caught by T2 as well, on 0.5.15 and 0.5.14
    ("0.5.15", "unwritten-slot", "extra_buffer_lazy", 16, "T2-recompute", "transformers", 0),
    ("0.5.14", "unwritten-slot", "extra_buffer_lazy", 16, "T2-recompute", "transformers", 0),
    # 0.5.10-0.5.12 (OLDEST_MRC): each the same rows (FORK_RELEASE_FAULTS)
    *((release, *row) for release in OLDEST_MRC for row in FORK_RELEASE_FAULTS),
]
"""Faults whose mechanism these releases have, on each release a few (the whole list on the newest).
Not run here: ghost-node (MambaRadixCache._insert_helper returns (0, mamba_exist=True) for an empty
key before it touches a node, so cache_finished_req's own empty insert of a request with nothing left
to cache stamps no root; the fault re-creates 0.5.19-0.5.20's tree core doing so, which these
releases lack), zero-initial-state and dropped-cow before 0.5.13 (no deferred copy-on-write: a hit's
state is copied at the match), mixed-track-dropped (0.5.15 has it for real: the test below) and
tp-desync."""
OLDEST_MRC_SKIPPED = 4


def _mrc_demo(
    tmp_path: Path, *args: str, verify: str = "transformers", release: str = MRC_RELEASE, env: dict[str, str] | None = None
) -> tuple[dict, list[dict]]:
    """The demo on an MRC release with a recording, and `check`'s violations of it."""
    mcinspect = str(venv_of(release) / "bin" / "mcinspect")
    found, summary = record_and_check(
        tmp_path, "--verify", verify, *args, env={**os.environ, **(env or {})}, requests=40, mcinspect=mcinspect
    )
    assert summary["engine"]["sglang_version"] == release
    assert summary["engine"]["hooks_generation"] == "mamba-radix-cache" and summary["stats"]["hook_errors"] == 0
    return summary, found


MRC_IN_CI = "0.5.15"
"""The MambaRadixCache release CI reads clean (the other generation's newest: CI's time budget)."""


@pytest.mark.parametrize("mrc_release", [_release_param(r, MRC_IN_CI) for r in MRC_RELEASES])
def test_a_mamba_radix_cache_release_reads_clean(mrc_release: str, tmp_path: Path) -> None:
    summary, found = _mrc_demo(tmp_path, verify="engine", release=mrc_release)
    stats = summary["stats"]
    assert summary["engine"]["hooks_skipped"] == []  # every hook, or its fallback (T3 on 0.5.13-0.5.14)
    assert stats["evicted_mamba_slots"] > 0 and summary["cached_tokens"] > 0 and stats["paths"]["copy-on-write"] > 0
    verify = stats["verify"]
    assert verify["verified"] > 0 and verify["working"] > 0 and verify["mismatches"] == 0 and verify["failed"] == 0
    if mrc_release in STAGED_COW_KEPT:  # sglang's own, outputs unchanged: nothing else is found
        # it shows only where admission rejects a request it staged a copy-on-write for, which
        # depends on the step timing (one 0.5.13 run on the loaded 2-core machine had none)
        assert {v["check"] for v in found} <= {"cow-source"}, found
    else:
        assert found == []


@pytest.mark.parametrize("release, tests", [(MRC_IN_CI, "test_mrc_generation.py"), ("0.5.16", "test_0516_generation.py")])
def test_the_real_cache_class_unit_tests_pass_on_their_release(release: str, tests: str) -> None:
    """The unit tests of sglang's real cache classes that .venv's 0.5.23 lacks skip there: here
    they run in the venv of a release that has them, none skipped. 0.5.15's MambaRadixCache
    (every-step captures of a tree of many nodes, its dirty marks, the mamba LRU check) and
    0.5.16's UnifiedRadixCache, which keeps its nodes itself (its hooks, its dirty marks)."""
    python = venv_of(release) / "bin" / "python"
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/unit/{tests}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "skipped" not in done.stdout, done.stdout[-3000:]


@opt_in(MATRIX_ENV)
@pytest.mark.parametrize("oldest", OLDEST_MRC)
def test_the_oldest_mamba_radix_cache_releases_read_clean(oldest: str, tmp_path: Path) -> None:
    summary, found = _mrc_demo(tmp_path, release=oldest)
    stats = summary["stats"]
    assert len(summary["engine"]["hooks_skipped"]) == OLDEST_MRC_SKIPPED, summary["engine"]["hooks_skipped"]
    assert stats["evicted_mamba_slots"] > 0 and summary["cached_tokens"] > 0
    assert stats["verify"]["verified"] > 0 and stats["verify"]["mismatches"] == 0
    assert found == []


@opt_in(MATRIX_ENV)
@pytest.mark.parametrize("mrc_release, fault, strategy, page_size, check, verify, latency", MRC_FAULTS)
def test_a_fault_is_caught_on_a_mamba_radix_cache_release(
    mrc_release: str, fault: str, strategy: str, page_size: int, check: str, verify: str, latency: int, tmp_path: Path
) -> None:
    log = tmp_path / "faults.jsonl"
    args = ("--fault", fault, "--strategy", strategy, "--page-size", str(page_size))
    # T2 rows: every state verified as soon as it can be read (fault_runs' setting for measuring detection)
    env = {LOG_ENV: str(log), **(VERIFY_ENV if verify != "off" else {})}
    summary, found = _mrc_demo(tmp_path, *args, verify=verify, release=mrc_release, env=env)
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    assert actions and all(a["step"] is not None for a in actions)
    first = min(a["step"] for a in actions)
    caught = sorted(v["step"] for v in found if v["check"] == check)
    verify = summary["stats"]["verify"]
    print(
        f"{fault} on {mrc_release}: first action at step {first} ({len(actions)} actions), {check} at "
        f"{f'+{caught[0] - first}' if caught else 'no step'} ({len(caught)} times); T2 {verify['mismatches']} of {verify['verified']} differ"
    )
    assert caught, f"{fault} on {mrc_release}: expected {check}, got {sorted({v['check'] for v in found})}"
    assert 0 <= caught[0] - first <= latency, (first, caught[:3])
    # zero-initial-state logs a request when its wrong state enters the tree; its working state is
    # wrong from its blank-started prefill on, which T2-working-state may see first (the same demo
    # without the fault, 0.5.14, VERIFY_ENV: 0 mismatches, no T2 violation)
    ahead = {"T2-working-state"} if fault == "zero-initial-state" else set()
    early = [
        v
        for v in found
        if v["step"] < first and v["check"] not in ahead and not (v["check"] == "cow-source" and mrc_release in STAGED_COW_KEPT)
    ]
    assert not early, early[:3]  # clean until the fault acted (but for the release's own bug)


MRC_TP = ("0.5.15", "0.5.14", "0.5.13", "0.5.12", "0.5.11", "0.5.10")
"""MambaRadixCache releases whose CPU engine runs two real TP ranks (`demo --tp 2`) with tp-desync:
0.5.13 reads the rank from the parallel state (no runtime context), 0.5.12's MambaPool allocates."""


@opt_in(MATRIX_ENV)
@pytest.mark.parametrize("mrc_release", MRC_TP)
def test_tp_desync_is_caught_on_a_mamba_radix_cache_release(mrc_release: str, tmp_path: Path) -> None:
    """Rank 1's allocator hands out other slots than rank 0's (faults/ranks.py): tp-agree, from
    both ranks' recordings, at the step it acted."""
    mcinspect = str(venv_of(mrc_release) / "bin" / "mcinspect")
    assert_fault_caught(tmp_path, "tp-desync", DEFAULT_FAMILY, "extra_buffer", 16, mcinspect=mcinspect)


MRC_ORACLE = ("0.5.15", "0.5.13")
"""MambaRadixCache releases where the engine oracle has been shown to run (the others' T2 runs on
transformers)."""


@opt_in(MATRIX_ENV)
@pytest.mark.parametrize("mrc_release", MRC_RELEASES + OLDEST_MRC)
def test_the_real_mixed_chunk_bug_of_a_mamba_radix_cache_release_is_caught(mrc_release: str, tmp_path: Path) -> None:
    """Every MambaRadixCache release's mix_with_running -> merge_batch drops the prefill rows'
    track fields (#24613, as on 0.5.21-0.5.22 above; each wheel's `merge_batch` sets them to
    None): the mixed forward never writes the ping-pong slots it donates. No fault injected: the
    write hooks see it at the step (the first mixed one), the fingerprints later, and T2 (the
    engine oracle, every state verified as soon as it can be read: the transformers oracle
    verified 1 of 33 queued states in a mixed run) that the cached states are wrong."""
    oracle = mrc_release in MRC_ORACLE
    args = ("--mixed-chunk", "--page-size", "1")
    summary, found = _mrc_demo(tmp_path, *args, verify="engine" if oracle else "off", release=mrc_release, env=VERIFY_ENV)
    stats = summary["stats"]
    assert stats["paths"]["mixed batch"] > 0
    firsts = {c: min(v["step"] for v in found if v["check"] == c) for c in {v["check"] for v in found}}
    print(
        f"mixed chunk on {mrc_release}: {stats['paths']['mixed batch']} mixed batches; first steps {firsts}; "
        f"T2 {stats['verify']['mismatches']} mismatches in {stats['verify']['verified']} cached states"
    )
    if mrc_release in OLDEST_MRC:
        # a chunk checkpoint inserts a fork of the kept entry (no donated track slot): write-ran
        # judges no forked state (as state-depth waits for a finish donation there); the
        # fingerprints see the never-written copy ("all zeros") within 3 steps
        assert firsts and min(firsts.values()) == firsts.get("content-immutable") <= 3, found[:3]
    else:
        assert {"write-ran", "content-immutable"} <= set(firsts), found[:3]
        assert min(firsts.values()) == firsts["write-ran"]  # the metadata check sees it first
    if oracle:
        assert stats["verify"]["mismatches"] > 0 and "T2-recompute" in firsts


@opt_in(MATRIX_ENV)
def test_a_mamba_radix_cache_release_reads_the_mamba2_model_clean(tmp_path: Path) -> None:
    """nemotron-h (extra_buffer, page 16) without T2: 0.5.15 has #37836 for real (T2 catches it:
    test_the_real_37836_of_the_release_is_caught_on_the_unpatched_engine); the bookkeeping reads clean."""
    summary, found = _mrc_demo(tmp_path, "--model", "nemotron-h", verify="off")
    stats = summary["stats"]
    assert stats["paths"]["finish donation"] > 0 and stats["evicted_mamba_slots"] > 0
    assert found == []  # provenance included: the decode track plans are hooked (11 false alarms before)
