"""The `mcinspect` command line. Exit codes: 0 ok, 1 violations found, 2 bad input or usage,
130 / 143 stopped by Ctrl-C / SIGTERM (errors.py). Errors are caught once, in `McinspectGroup`:
commands let `McinspectError` rise."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from typer.core import TyperGroup

from .cli_output import fail, print_ranks, print_summary, progress, serve_until_interrupted, stderr, summary_dict, warn
from .errors import McinspectError
from .target import Target, parse_targets

if TYPE_CHECKING:
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

    from .checks import Violation
    from .schema import CacheState
    from .sources import LoadedState

STOPPED = {signal.SIGINT: 130, signal.SIGTERM: 143}
"""Exit code of a command stopped by each signal (128 + its number)."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt (not an Exception: no handler
    of a library swallows it)."""


_stopped_by: list[int] = []
"""The stop signal received, if any."""


def _stopping(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: stop. From now on this process is shutting down: a second signal, or
    sglang's SIGQUIT as its children die meanwhile, must not break off the cleanup (the engine's
    processes, a recording's end mark), and sglang's complaints about them are noise."""
    _stopped_by.append(signum)
    for other in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(other, signal.SIG_IGN)
    logging.getLogger("sglang").setLevel(logging.CRITICAL)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated from None
    # Inside an event loop (sglang's engine waiting for output): the loop would swallow the
    # exception as a failed callback; stopped, it ends the wait, and the command unwinds.
    loop.stop()


class McinspectGroup(TyperGroup):
    """The one place errors become a line on stderr and an exit code."""

    def invoke(self, ctx: typer.Context) -> object:
        try:
            return super().invoke(ctx)
        except typer.Exit:
            raise
        except BaseException as exc:
            if _stopped_by:  # whatever the stop broke off on its way out
                _stopped(_stopped_by[0])
            if isinstance(exc, McinspectError):
                fail(str(exc), exc.exit_code)
            if isinstance(exc, OSError):  # a file named on the command line
                fail(f"cannot use {exc.filename}: {exc.strerror}" if exc.filename else str(exc))
            if isinstance(exc, KeyboardInterrupt):
                _stopped(signal.SIGINT)
            raise


def _stopped(signum: int) -> None:
    stderr.print("stopped", highlight=False)
    raise typer.Exit(STOPPED[signum])


app = typer.Typer(
    cls=McinspectGroup,
    help="Inspect the mamba (SSM) prefix cache of a live SGLang engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # a docstring paragraph is one paragraph, wrapped to the terminal
)


TokenOption = Annotated[str, typer.Option(envvar="MCINSPECT_TOKEN", help="Token the engine requires off loopback.", show_default=False)]
TimeoutOption = Annotated[float, typer.Option(min=0.1, help="Seconds to wait for each answer.")]
TARGETS_HELP = (
    "PORT or HOST:PORT of the engine's hooks (its MCINSPECT_PORT: rank 0's), or HOST:PORT,HOST:PORT,... for an engine "
    "whose ranks run on several hosts (rank 0's host first, the same base port on each); rank r listens on PORT + 2 * r"
)
RankOption = Annotated[
    Optional[int],
    typer.Option(
        "--rank",
        min=0,
        help="Which rank of a tensor-parallel engine (default 0): each rank has its own tree, slots and requests; "
        "a recording's rank r is the file beside it (run.rank1.mcrec).",
        show_default=False,
    ),
]
EveryStepOption = Annotated[
    bool,
    typer.Option(
        "--every-step/--live",
        help="Have the engine capture every scheduler step for this view (~1 ms a step on the CPU demo); "
        "--live: as often as its time budget allows, a few frames a second (MCINSPECT_LIVE_BUDGET, default 0.8% of the scheduler's time).",
    ),
]


def _needs_terminal(command: str) -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        fail(f"`mcinspect {command}` is a TUI and needs a terminal; for a pipe use `mcinspect check` or `mcinspect snapshot --format tree`")


class TreeCore(str, enum.Enum):
    python = "python"
    rust = "rust"


class Verify(str, enum.Enum):
    engine = "engine"
    transformers = "transformers"
    both = "both"
    off = "off"


class Model(str, enum.Enum):
    """The embedded engine's model families (`mcinspect_engine_hooks.families`)."""

    qwen3_next = "qwen3-next"
    nemotron_h = "nemotron-h"
    qwen3_5 = "qwen3.5"


class Strategy(str, enum.Enum):
    no_buffer = "no_buffer"
    extra_buffer = "extra_buffer"
    extra_buffer_lazy = "extra_buffer_lazy"


@app.callback()
def main() -> None:
    """Inspect the mamba (SSM) prefix cache of a live SGLang engine.

    Start with `mcinspect demo --headless`: the real SGLang engine on this CPU with a tiny
    Qwen3-Next (or `--model nemotron-h`, `--model qwen3.5`), driven by a workload that hits,
    extends and evicts the cache.
    """
    for signum in STOPPED:  # a plain kill stops any command cleanly, like Ctrl-C
        signal.signal(signum, _stopping)


@app.command()
def demo(
    model: Annotated[
        Model, typer.Option(help="The tiny model's family: qwen3-next and qwen3.5 (gated delta net) or nemotron-h (Mamba2).")
    ] = Model.qwen3_next,
    strategy: Annotated[Strategy, typer.Option(help="--mamba-radix-cache-strategy of the engine.")] = Strategy.extra_buffer,
    page_size: Annotated[int, typer.Option(min=1, help="KV page size (no_buffer needs 1).")] = 16,
    seed: Annotated[int, typer.Option(help="Seeds the workload and the engine: same seed, same outputs.")] = 0,
    requests: Annotated[int, typer.Option(min=1, help="How many requests the workload sends.")] = 40,
    port: Annotated[int, typer.Option(help="Inspector port of the engine's hooks (scheduler rank 0).")] = 7777,
    overlap: Annotated[bool, typer.Option(help="Overlap scheduling (forced off for no_buffer, which refuses it).")] = True,
    mixed_chunk: Annotated[
        bool, typer.Option(help="sglang's --enable-mixed-chunk: a prefill chunk and the running decodes share one forward.")
    ] = False,
    headless: Annotated[
        bool, typer.Option(help="No TUI: print progress and a summary (default: the TUI, attached to the engine).")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object on stdout.")] = False,
    tree_core: Annotated[
        TreeCore, typer.Option(help="sglang's tree core: python shows every node, rust (sglang's default) hides nodes off request paths.")
    ] = TreeCore.python,
    fault: Annotated[Optional[str], typer.Option(help="Reproduce an upstream bug class in the engine (see `mcinspect faults`).")] = None,
    verify: Annotated[
        Optional[Verify],
        typer.Option(
            help="Check T2: compare each cached state (and sampled running requests' working states) with its prefix recomputed alone, by the engine's own forward pass, by transformers' implementation of the tiny model, or both. Default engine (off with --attn-dp).",
            show_default=False,
        ),
    ] = None,
    record: Annotated[
        Optional[str], typer.Option(help="Record the stream of the workload to this file (replay, check, render, diff it later).")
    ] = None,
    hooks: Annotated[
        bool, typer.Option(help="Load mcinspect's hooks in the engine (off: the engine runs untouched, for A/B runs).")
    ] = True,
    serve: Annotated[
        bool,
        typer.Option(
            help="After the workload keep the engine up (Ctrl-C stops it), for `mcinspect snapshot/info PORT` from another terminal."
        ),
    ] = False,
    tp: Annotated[
        int,
        typer.Option(
            "--tp",
            min=1,
            help="Tensor-parallel ranks (sglang's --tp-size): one scheduler, tree and pair of inspector ports (PORT + 2 * rank) per rank; `--record` records every rank and `mcinspect check` compares them.",
        ),
    ] = 1,
    attn_dp: Annotated[
        int,
        typer.Option(
            "--attn-dp",
            min=1,
            help="Attention data parallelism (sglang's --attn-dp-size, must divide --tp): the ranks form this many groups, each scheduling its own requests with its own tree; tp-agree compares the ranks of a group only. T2 verification is off.",
        ),
    ] = 1,
    http_port: Annotated[
        Optional[int],
        typer.Option(
            help="Serve the engine through sglang's own HTTP server (`python -m sglang.launch_server`) on this port; the workload, and your curl or OpenAI-client requests, go over HTTP. Implies --headless; add --serve to keep it up.",
            min=1,
            max=65535,
        ),
    ] = None,
    self_check: Annotated[
        bool, typer.Option(help="Verify every captured step against a full re-read and sglang's counters (slow; for debugging mcinspect).")
    ] = False,
    engine_log_level: Annotated[str, typer.Option(help="sglang's log level (info shows every batch).")] = "error",
    every_step: Annotated[
        Optional[bool],
        typer.Option(
            "--every-step/--live",
            help="TUI: every scheduler step, or the live stream (default: every step with --fault, else live).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the real SGLang engine on the CPU with a tiny hybrid model and a cache workload.

    The workload mixes shared system prefixes, multi-turn conversations, branches from the
    middle of earlier prompts, chunked prefill and enough unrelated prompts to force evictions.
    """
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

    from .demo import run_demo

    headless = headless or json_out or serve or http_port is not None  # ways of running without the TUI
    if not headless and not sys.stdout.isatty():
        fail("the TUI needs a terminal; add --headless for progress and a summary")
    if not headless and not hooks:
        fail("the TUI shows what the hooks capture; drop --no-hooks or add --headless")
    if record is not None and not hooks:
        fail("--record records what the hooks stream; drop --no-hooks")
    if serve and not hooks:
        fail("--serve keeps the engine up for inspector clients; it needs the hooks (drop --no-hooks)")
    config = EmbeddedEngineConfig(
        model=model.value,
        strategy=strategy.value,
        page_size=page_size,
        seed=seed,
        overlap=overlap,
        inspector_port=port if hooks else None,
        log_level=engine_log_level,
        tree_core=tree_core.value,
        self_check=self_check,
        fault=fault,
        verify=verify.value if verify is not None else ("off" if attn_dp > 1 else "engine"),
        mixed_chunk=mixed_chunk,
        tp_size=tp,
        attn_dp_size=attn_dp,
    )
    if not headless:
        if every_step is None:  # a fault is caught at its step: every step; else the live stream
            every_step = fault is not None
        _demo_with_tui(config, requests, token="", every_step=every_step)
        return
    try:
        with progress(config, requests) as (on_started, on_wave):
            summary = run_demo(
                config,
                requests,
                on_engine_started=on_started,
                on_wave_done=on_wave,
                after_workload=(lambda s: serve_until_interrupted(s, port, json_out)) if serve else (lambda s: None),
                record_path=record,
                http_port=http_port,
            )
    except KeyboardInterrupt:
        if not serve:  # --serve runs until Ctrl-C: that is its normal end
            raise
        raise typer.Exit(0) from None
    if json_out:
        typer.echo(json.dumps(summary_dict(summary)))
    else:
        print_summary(summary)


@app.command()
def snapshot(
    target: Annotated[
        str,
        typer.Argument(help=TARGETS_HELP + "; for --format tree also a snapshot file or a recording (its last step)."),
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="File to write, '-' for stdout.")] = "-",
    fmt: Annotated[
        str, typer.Option("--format", help="json: the whole snapshot; tree: the radix tree as text (colour on a terminal only).")
    ] = "json",
    max_nodes: Annotated[
        Optional[int], typer.Option(min=1, help="tree: node lines before the rest folds into counted '…' lines (default 200).")
    ] = None,
    rank: RankOption = None,
    token: TokenOption = "",
    timeout: TimeoutOption = 10.0,
) -> None:
    """Dump one consistent snapshot of one rank's cache (tree, slot owners, requests, KV) as JSON, or print its tree.

    A snapshot is one scheduler process's: with several ranks, `--rank N` picks one (`mcinspect
    check PORT` compares them all).
    """
    from .inspect_commands import fetch_snapshot, rank_target, write_json

    if fmt == "tree":
        _snapshot_tree(target, output, max_nodes, token, timeout, rank)
        return
    if fmt != "json":
        fail(f"--format {fmt}: pick json or tree")
    if max_nodes is not None:
        fail("--max-nodes applies to --format tree")
    if os.path.exists(target):
        fail(f"{target} is a file, not PORT or HOST:PORT: `--format tree` prints a file's tree")
    where = rank_target(parse_targets(target), rank or 0, token, timeout)
    data = fetch_snapshot(where, token, timeout)
    write_json(data, output)
    if output != "-":
        state = data.state
        stderr.print(
            f"wrote {output}: step {state.step}, {len(state.nodes)} nodes, {len(state.requests)} requests, "
            f"{len(state.slots)} slots (seq {data.seq})",
            highlight=False,
        )


def _snapshot_tree(source: str, output: str, max_nodes: int | None, token: str, timeout: float, rank: int | None) -> None:
    """The tree of SOURCE: coloured to a terminal, plain to a pipe or a file."""
    from rich.console import Console

    from .tree_text import DEFAULT_MAX_NODES, MAX_LEVELS, build_tree, levels_for_width, plain_text, print_tree

    loaded = _load(source, None, token, timeout, rank)
    flagged = {node for violation in _violations_of(loaded.state) for node in violation.nodes}
    terminal = output == "-" and sys.stdout.isatty()
    console = Console() if terminal else None
    levels = levels_for_width(console.width) if console is not None else MAX_LEVELS
    tree = build_tree(loaded.state, max_nodes=max_nodes or DEFAULT_MAX_NODES, max_levels=levels, flagged=flagged)
    if console is not None:
        print_tree(tree, console)
        return
    _write_bytes(plain_text(tree).encode(), output)
    if output != "-":
        stderr.print(f"wrote {output}: {tree.printed:,} node lines, {tree.folded:,} nodes folded, from {loaded.origin}", highlight=False)


@app.command()
def info(
    target: Annotated[str, typer.Argument(help=TARGETS_HELP + ".")],
    token: TokenOption = "",
    timeout: TimeoutOption = 5.0,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per rank.")] = False,
) -> None:
    """Engine configuration, every rank (where it listens, its step, slots in use), schema version and the hooks' counters (drops, errors)."""
    import msgspec

    from .inspect_commands import rank_infos

    ranks = rank_infos(parse_targets(target), token, timeout)
    if json_out:
        for rank in ranks:
            address = {"host": rank.rank.target.host, "port": rank.rank.target.port}
            typer.echo(msgspec.json.encode({"rank": rank.rank.rank, "address": address, "info": rank.info, "stats": rank.stats}).decode())
    else:
        print_ranks(ranks)


class RenderFormat(str, enum.Enum):
    svg = "svg"
    png = "png"
    dot = "dot"


@app.command()
def render(
    source: Annotated[
        str, typer.Argument(help="A snapshot file, a recording (with --step), or PORT / HOST:PORT[,HOST:PORT...] of a live engine.")
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="File to write ('-' for stdout).")],
    step: Annotated[Optional[int], typer.Option(help="Recording step to render (default: the last).")] = None,
    fmt: Annotated[
        RenderFormat, typer.Option("--format", help="svg and png run Graphviz's dot; dot writes its source.")
    ] = RenderFormat.svg,
    focus: Annotated[Optional[str], typer.Option(help="A node id or request id: render its path and neighbourhood.")] = None,
    max_nodes: Annotated[int, typer.Option(min=10, help="Fold the rest (chains, unlocked stateless subtrees) into summary nodes.")] = 500,
    rank: RankOption = None,
    token: TokenOption = "",
) -> None:
    """Draw one rank's radix tree with its mamba slots, requests and ping-pong buffers (Graphviz)."""
    from .inspect_commands import write_bytes
    from .render import parse_focus
    from .render import render as render_state

    loaded = _load(source, step, token, rank=rank)
    focus_id = parse_focus(loaded.state, focus) if focus is not None else None
    data = render_state(loaded.state, fmt.value, focus=focus_id, max_nodes=max_nodes, violations=_violations_of(loaded.state))
    write_bytes(data, output)
    if output != "-":
        stderr.print(f"wrote {output} ({len(data):,} bytes) from {loaded.origin}", highlight=False)


@app.command()
def record(
    target: Annotated[str, typer.Argument(help=TARGETS_HELP + ".")],
    output: Annotated[
        str, typer.Option("--output", "-o", help="Recording file to write (rank 0's; rank r's goes beside it: run.rank1.mcrec).")
    ],
    steps: Annotated[Optional[int], typer.Option(min=1, help="Stop after this many steps (default: until Ctrl-C).")] = None,
    token: TokenOption = "",
) -> None:
    """Record the stream of every rank of a live engine (schema-versioned, compressed, crash-safe per frame).

    `check`, `replay`, `render`, `diff` and `snapshot --format tree` read the rank files beside
    the one given.
    """
    from .rank_files import rank_path
    from .ranks import discover
    from .recorder import record_ranks

    ranks = discover(parse_targets(target), token, 5.0)
    where = ranks[0].target
    also = f" (and its {len(ranks) - 1} other ranks to {rank_path(output, 1)}, ...)" if len(ranks) > 1 else ""
    stderr.print(f"recording {where.host}:{where.port} to {output}{also}; Ctrl-C stops", highlight=False)
    # Ctrl-C / kill set a flag the loop reads between frames: a KeyboardInterrupt could land in
    # a finalizer, where Python ignores it, and the recording would never stop (or end torn).
    stop = threading.Event()
    stopped_by: list[int] = []
    for signum in STOPPED:
        signal.signal(signum, lambda signum, frame: (stopped_by.append(signum), stop.set()))
    for rank, result in enumerate(record_ranks([r.target for r in ranks], output, token=token, steps=steps, stop=stop)):
        stderr.print(
            f"wrote {rank_path(output, rank)}: {result.frames} frames, steps {result.first_step}..{result.last_step}, {result.resyncs} resyncs",
            highlight=False,
        )
    if stopped_by:
        _stopped(stopped_by[0])


@app.command()
def diff(
    a: Annotated[str, typer.Argument(help="A snapshot file, or a recording (with --from/--to).")],
    b: Annotated[Optional[str], typer.Argument(help="A second snapshot file (omit with a recording).")] = None,
    from_step: Annotated[Optional[int], typer.Option("--from", help="Recording step to diff from.")] = None,
    to_step: Annotated[Optional[int], typer.Option("--to", help="Recording step to diff to.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The diff as one JSON object.")] = False,
    rank: RankOption = None,
) -> None:
    """What changed between two moments of one rank: nodes added / evicted / split, slot owners, fingerprints, locks."""
    from .diff import diff_json, diff_states, format_diff

    if b is None:
        if from_step is None or to_step is None:
            fail("give two snapshots, or one recording with --from and --to")
        first, second = _load(a, from_step, "", rank=rank), _load(a, to_step, "", rank=rank)
    else:
        if from_step is not None or to_step is not None:
            fail("--from/--to apply to one recording; two snapshots need neither")
        if rank is not None:
            fail("--rank picks a rank of one recording; two snapshot files are one rank's each")
        first, second = _load(a, None, ""), _load(b, None, "")
    result = diff_states(first.state, second.state)
    if json_out:
        typer.echo(diff_json(result).decode())
    else:
        typer.echo(f"{first.origin} -> {second.origin}")
        typer.echo(format_diff(result))


def _load(source: str, step: int | None, token: str, timeout_s: float = 10.0, rank: int | None = None) -> LoadedState:
    from .sources import load_state

    return load_state(source, step=step, token=token, timeout_s=timeout_s, on_warning=warn, rank=rank)


def _violations_of(state: CacheState) -> list[Violation]:
    """What the checks find on this one state, to highlight in the picture."""
    from .check_driver import CheckDriver
    from .schema import Counters

    return CheckDriver().step(state, (), counters=Counters(), restart=True)


def _write_bytes(data: bytes, output: str) -> None:
    from .inspect_commands import write_bytes

    write_bytes(data, output)


@app.command()
def check(
    source: Annotated[
        str,
        typer.Argument(
            help="A snapshot file, a recording (the other ranks' files beside it too), or PORT / HOST:PORT[,HOST:PORT...] of a live engine (every rank)."
        ),
    ],
    checks: Annotated[Optional[list[str]], typer.Option("--checks", help="Run only these checks (repeat; see `mcinspect checks`).")] = None,
    steps: Annotated[Optional[int], typer.Option(min=1, help="Live: stop after this many steps (default: until Ctrl-C).")] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per group of violations with one cause (check, first_step, last_step, repeats, what it touched).",
        ),
    ] = False,
    ungrouped: Annotated[bool, typer.Option("--ungrouped", help="With --json: one object per violation, as found.")] = False,
    token: TokenOption = "",
) -> None:
    """Check the cache invariants and slot contents; exit 0 clean, 1 violations, 2 bad input or a check that crashed.

    Every rank of an engine is checked (a violation of rank r says "rank r:"), and `tp-agree`
    compares the ranks that run the same batches at every step both have.
    """
    from .check_runner import check_file, check_live
    from .cli_output import ViolationReport
    from .ranks import discover

    if ungrouped and not json_out:
        fail("--ungrouped applies to --json (the table always groups)")
    report = ViolationReport(json_out, ungrouped)
    if os.path.exists(source):
        for violation in check_file(source, checks, on_warning=warn):
            report.add(violation)
    else:
        try:
            ranks = discover(parse_targets(source), token)
            check_live([r.target for r in ranks], token=token, names=checks, steps=steps, on_violation=report.add)
        except (KeyboardInterrupt, Terminated):
            report.finish()
            raise
    report.finish()
    raise typer.Exit(1 if report.count else 0)


@app.command()
def verify(
    target: Annotated[str, typer.Argument(help=TARGETS_HELP + ".")],
    node: Annotated[Optional[list[int]], typer.Option("--node", help="A tree node id to verify (repeat the option for more).")] = None,
    all_nodes: Annotated[bool, typer.Option("--all", help="Every node that holds a mamba state.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per node on stdout.")] = False,
    token: TokenOption = "",
    timeout: TimeoutOption = 5.0,
    wait: Annotated[float, typer.Option(min=1, help="Seconds to wait for the engine to work through all the nodes.")] = 600.0,
) -> None:
    """Recompute cached states with the engine's own forward pass, now, and compare (check T2).

    For each node the engine prefills the node's token prefix alone from an empty state (no
    prefix match, no insert: the tree and its LRU stay as they are) and compares the result with
    the node's slot, per conv tensor and for the SSM state. Works on any model and device the
    engine serves; it runs between the engine's batches. Exit 0: all equal; 1: a mismatch; 2: bad
    input (unknown node, engine unreachable, model without mamba state) or a named node the
    engine's load kept from its turn: evicted while it waited, or no KV room for its prefix
    without evicting (under --all such nodes are listed and skipped).

    On request only for an engine of one rank: with several ranks every rank must run the same
    reference forward at once (its collectives), which the automatic verification does
    (MCINSPECT_VERIFY=engine); `mcinspect check PORT` then reports T2 on every rank.
    """
    from .cli_output import print_verdicts
    from .verify_command import exit_code, single_rank, verify_nodes

    if not node and not all_nodes:
        fail("name the nodes with --node ID (see `mcinspect snapshot PORT --format tree`) or ask for --all")
    show = (lambda done, total: stderr.print(f"verified {done} of {total}", end="\r")) if sys.stderr.isatty() else (lambda d, t: None)
    where = single_rank(parse_targets(target), token, timeout)
    judged = verify_nodes(where, list(node or []), all_nodes, token=token, timeout_s=timeout, wait_s=wait, on_progress=show)
    print_verdicts(judged, json_out)
    raise typer.Exit(exit_code(judged, all_nodes))


@app.command("checks")
def list_checks() -> None:
    """The checks `mcinspect check` runs: what each catches, the upstream bugs, what it cannot see."""
    from .checks import CHECKS
    from .cli_output import print_checks

    print_checks(CHECKS.values())


def _demo_with_tui(config: EmbeddedEngineConfig, requests: int, token: str, every_step: bool) -> None:
    from .demo import run_demo_in_background
    from .tui import run_attach

    with run_demo_in_background(config, requests):
        run_attach((Target("127.0.0.1", config.inspector_port),), token, every_step)


@app.command()
def attach(
    target: Annotated[str, typer.Argument(help=TARGETS_HELP + ".")],
    token: TokenOption = "",
    every_step: EveryStepOption = False,
) -> None:
    """The TUI on a live engine: tree, slot map, page map, requests, events, violations, time travel.

    Every rank of the engine is followed: the view shows one at a time (R: the next rank, at the
    same step), and the ranks tab (6) sets them side by side with `tp-agree`'s verdict.
    """
    from .tui import run_attach

    targets = parse_targets(target)
    _needs_terminal("attach")
    run_attach(targets, token, every_step)


@app.command()
def replay(
    path: Annotated[
        str, typer.Argument(help="A recording written by `mcinspect record` or `demo --record` (its other ranks' files beside it too).")
    ],
) -> None:
    """The TUI on a recording: step through what happened, with the checks' findings; every rank recorded (R: the next rank)."""
    from .tui import load_recordings, run_replay

    sources = load_recordings(path, on_warning=warn)  # their errors and warnings before the screen changes
    _needs_terminal("replay")
    run_replay(sources)


@app.command()
def faults() -> None:
    """The fault library: upstream bug classes `mcinspect demo --fault NAME` reproduces."""
    from mcinspect_engine_hooks.cpu_engine.faults import FAULTS

    from .cli_output import print_faults

    print_faults(FAULTS.values())


@app.command("tiny-model")
def tiny_model(
    model: Annotated[Model, typer.Option(help="The model family.")] = Model.qwen3_next,
) -> None:
    """Write the embedded engine's tiny random-weight model (once; cached) and print its directory.

    For sglang's own server on this CPU: `python -m sglang.launch_server --model-path "$(mcinspect
    tiny-model)" --device cpu --skip-tokenizer-init ...` (README: "Using the hooks on your own engine").
    """
    from mcinspect_engine_hooks.cpu_engine.tiny_model import ensure_tiny_model

    typer.echo(str(ensure_tiny_model(model.value)))


@app.command()
def hooks(
    markdown: Annotated[bool, typer.Option(help="Print the hook table as the README shows it (no sglang import).")] = False,
) -> None:
    """The sglang methods mcinspect hooks, as the installed sglang has them: which exist, which
    stand in for a missing one (fallback) and which are skipped, with what that costs.

    Feature detection, as in the engine: each target is resolved in the installed sglang (this
    imports sglang's modules: a few seconds). Exit 2 if no generation of the adapters fits.
    """
    from mcinspect_engine_hooks.hooks_0523 import markdown as hook_markdown

    if markdown:
        typer.echo(hook_markdown(), nl=False)
        return
    from mcinspect_engine_hooks.generations import GENERATIONS, DetectionFailed, Unsupported, resolve, select

    from .cli_output import print_hooks

    try:
        selection = select()
        if isinstance(selection, Unsupported):  # the table all the same: what this release lacks
            print_hooks(resolve(GENERATIONS[0]))
            fail(selection.reason)
    except DetectionFailed as exc:
        fail(f"{exc}; on a machine without a GPU run `MCINSPECT_CPU_ENGINE=1 mcinspect hooks` (the embedded engine's CPU patches)")
    print_hooks(selection)
