"""How the CLI talks to a person: one-line errors, progress on stderr, the demo summary."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .checks import CheckSpec, Violation, ViolationGroup, ViolationGroups
from .schema import EngineInfo, VerifyStats

if TYPE_CHECKING:
    from mcinspect_engine_hooks.cpu_engine.faults import Fault
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

    from .demo import DemoSummary
    from .inspect_commands import RankInfo
    from .verify_command import Judged

stderr = Console(stderr=True)
stdout = Console()


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` on one line to stderr and exit with `code`."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    """Print `warning: message` on one line to stderr (a truncated recording, a seq gap)."""
    stderr.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def progress(config: EmbeddedEngineConfig, total: int) -> Iterator[tuple[Callable[[float], None], Callable[[int], None]]]:
    """Show engine start-up, then workload progress; yields the two callbacks run_demo takes."""
    overlap = "on" if config.effective_overlap else "off"
    stderr.print(
        f"mcinspect demo: {config.model}, {config.strategy}, page {config.page_size}, overlap {overlap}, seed {config.seed}, "
        f"{total} requests; " + (f"inspector on 127.0.0.1:{config.inspector_port}" if config.inspector_port is not None else "hooks off"),
        highlight=False,
    )
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=False) as bar:
        start = bar.add_task("starting the SGLang engine on the CPU", total=None)
        work: dict[str, Any] = {}

        def on_started(seconds: float) -> None:
            bar.update(start, description=f"engine started in {seconds:.1f} s", total=1, completed=1)
            work["task"] = bar.add_task("requests", total=total)

        def on_wave(done: int) -> None:
            bar.update(work["task"], completed=done)

        yield on_started, on_wave


def serve_until_interrupted(summary: DemoSummary, port: int | None, json_out: bool) -> None:
    """Print the summary now (the run may end only at Ctrl-C), then wait."""
    if json_out:
        typer.echo(json.dumps(summary_dict(summary)), nl=True)
    else:
        print_summary(summary)
    if summary.http_url:
        stderr.print(
            f"sglang's HTTP server: {summary.http_url} (token ids in and out), e.g. "
            f"""curl -s {summary.http_url}/generate -H 'Content-Type: application/json' -d '{{"input_ids": [1, 2, 3], "sampling_params": {{"max_new_tokens": 8}}}}'"""
        )
    stderr.print(f"engine up: try `mcinspect info {port}` or `mcinspect snapshot {port} -o snap.json`; Ctrl-C stops it")
    while True:  # time.sleep is interrupted by SIGINT at once (a bare lock wait may not be)
        time.sleep(1)


def summary_dict(summary: DemoSummary) -> dict[str, Any]:
    """The summary as plain JSON-able data, derived figures included."""
    data = {key: value for key, value in vars(summary).items() if key not in ("stats", "engine")}
    data["hit_rate"] = round(summary.hit_rate, 4)
    data["generated_tokens_per_s"] = round(summary.generated_tokens_per_s, 2)
    data["processed_tokens_per_s"] = round(summary.processed_tokens_per_s, 2)
    data["stats"] = msgspec.to_builtins(summary.stats) if summary.stats is not None else None
    data["engine"] = msgspec.to_builtins(summary.engine) if summary.engine is not None else None
    return data


def verification_line(oracles: str, v: VerifyStats, workload_s: float) -> str:
    """What the engine's T2 verifier did, in one line."""
    busy = f" ({v.busy_seconds / workload_s:.0%} of the workload's time)" if workload_s else ""
    per = f", {1000 * v.seconds / (v.verified + v.working):.1f} ms each" if v.verified + v.working else ""
    return (
        f"{oracles} oracle: {v.verified} cached states and {v.working} working states compared, "
        f"{v.mismatches} mismatches; {v.queued} still queued, {v.gone} left the tree before their turn, "
        f"{v.no_room} waits for room; {v.seconds:.2f} s of references{per}, {v.busy_seconds:.2f} s while busy{busy}"
    )


def _limits(judged: Judged) -> str:
    return ", ".join(f"{name} {limit:g}" for name, limit in judged.tolerance.items())


def print_verdicts(judged: list[Judged], json_out: bool) -> None:
    """`mcinspect verify`'s results: a table, or one JSON object per node."""
    if json_out:
        for j in judged:
            v = j.verdict
            verdict = "error" if j.equal is None else "equal" if j.equal else "mismatch"
            row = {**msgspec.to_builtins(v), "tolerance": j.tolerance or None, "verdict": verdict}
            typer.echo(json.dumps(row))
        return
    if not stdout.is_terminal:  # one whole line per node: nothing folded or cut in a pipe or a log
        for j in judged:
            v = j.verdict
            if j.equal is None:
                typer.echo(f"node {v.node}: not verified: {v.error}")
                continue
            verdict = "equal" if j.equal else "MISMATCH"
            typer.echo(
                f"node {v.node} slot {v.slot}: {verdict} ({v.oracle} oracle, {v.tokens} tokens; conv relative L2 "
                f"{v.conv_rel_l2:.3g}, temporal {v.temporal_rel_l2:.3g}, tolerance {_limits(j)})"
            )
        return
    table = Table(title="T2: cached states against their prefixes recomputed", title_justify="left")
    for column in ("node", "slot", "tokens", "oracle", "conv rel L2", "temporal rel L2", "tolerance", "verdict"):
        table.add_column(column, overflow="fold")
    for j in judged:
        v = j.verdict
        if j.equal is None:
            table.add_row(
                str(v.node), str(v.slot) if v.slot >= 0 else "-", "-", v.oracle or "-", "-", "-", "-", f"[red]not verified: {v.error}[/]"
            )
            continue
        verdict = "[green]equal[/]" if j.equal else "[bold red]MISMATCH[/]"
        table.add_row(
            str(v.node), str(v.slot), str(v.tokens), v.oracle, f"{v.conv_rel_l2:.3g}", f"{v.temporal_rel_l2:.3g}", _limits(j), verdict
        )
    stdout.print(table)


def print_summary(summary: DemoSummary) -> None:
    table = Table(title="mcinspect demo summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    from mcinspect_engine_hooks.families import get_family

    engine = summary.engine
    table.add_row("model", summary.model + (f" ({engine.model_path})" if engine is not None else ""))
    layout = engine.state_layout if engine is not None else get_family(summary.model).state_layout
    table.add_row("mamba state", escape(layout))  # its [axes] are not markup
    if engine is not None and engine.temporal_shape:
        table.add_row("state per slot", escape(state_shapes_line(engine)))
    table.add_row("requests", f"{summary.requests} in {summary.waves} waves, {summary.requests_with_hits} hit the cache")
    table.add_row(
        "prompt tokens",
        f"{summary.prompt_tokens:,}, cached {summary.cached_tokens:,} ({summary.hit_rate:.1%} hit rate)",
    )
    table.add_row("cached by kind", ", ".join(f"{k} {v:,}" for k, v in sorted(summary.cached_by_kind.items())))
    table.add_row(
        "throughput",
        f"{summary.generated_tokens:,} generated in {summary.workload_s:.1f} s: "
        f"{summary.generated_tokens_per_s:.1f} tok/s generated, {summary.processed_tokens_per_s:.1f} tok/s computed",
    )
    stats = summary.stats
    if stats is not None:
        table.add_row("evictions", f"{stats.evicted_mamba_slots} mamba slots, {stats.evicted_tokens:,} KV tokens")
        table.add_row(
            "mamba slots",
            f"{stats.mamba_slots_in_use} of {stats.mamba_pool_size} in use at the end, peak {stats.mamba_slots_peak}",
        )
        for layout in stats.example_layouts:
            table.add_row(
                "slots per request",
                f"{1 + len(layout.ping_pong)} (working + {len(layout.ping_pong)} ping-pong), e.g. working "
                f"{layout.working}, ping-pong {layout.ping_pong}",
            )
        table.add_row("hook errors", str(stats.hook_errors))
        if stats.paths:
            table.add_row("cache paths", ", ".join(f"{name} {count:,}" for name, count in stats.paths.items()))
        if summary.verify != "off":
            table.add_row("T2 verification", verification_line(summary.verify, stats.verify, summary.workload_s))
        if stats.step:
            table.add_row(
                "inspector time",
                f"{1000 * stats.hook_seconds / stats.step:.2f} ms per step on the scheduler thread "
                f"({stats.counters.unobserved_steps} of {stats.step} steps unobserved)",
            )
    table.add_row("engine start", f"{summary.engine_start_s:.1f} s")
    if summary.tp_size > 1 and summary.engine is not None:
        port = summary.engine.request_port
        ports = ", ".join(str(p) for p in summary.rank_ports)
        groups = f" in {summary.engine.attn_dp_size} attention DP groups" if summary.engine.attn_dp_size > 1 else ""
        table.add_row(
            "TP ranks",
            f"{summary.tp_size}{groups}, inspector ports {ports} (`mcinspect info {port}` lists them); figures above are rank 0's",
        )
    if summary.http_url:
        table.add_row("served by", f"sglang's HTTP server at {summary.http_url} (python -m sglang.launch_server)")
    table.add_row("output digest", f"{summary.output_digest} (same seed, same digest)")
    stdout.print(table)


def print_ranks(ranks: list[RankInfo]) -> None:
    """`mcinspect info`: the engine once, then one row per scheduler process."""
    first = ranks[0].info
    stdout.print(
        f"[bold]{first.model_path}[/]  sglang {first.sglang_version}, schema {first.schema_version}\n"
        f"strategy {first.strategy}, page size {first.page_size}, overlap {'on' if first.overlap else 'off'}, "
        f"tree core {first.tree_core}{'' if first.full_tree_detail else ' (nodes off request paths hidden)'}\n"
        f"mamba pool {first.mamba_pool_size} slots, KV pool {first.kv_pool_tokens:,} tokens"
        + (f"\nmodel family {first.model_family}: {escape(first.state_layout)}" if first.model_family else "")
        + (f"\nstate per slot: {escape(state_shapes_line(first))}" if first.temporal_shape else "")
        + f"\n{verification_setting(first)}"
        + (f"\nhooks: the {first.hooks_generation} adapter" if first.hooks_generation else "")
        + (
            f"; not in this sglang: {', '.join(first.hooks_skipped)} (`mcinspect hooks` says what that costs)"
            if first.hooks_skipped
            else ""
        )
        + f"\n{layout_line(first, len(ranks))}",
        highlight=False,
    )
    table = Table(
        "rank", "tp", "dp", "pid", "host", "ports", "step", "unobserved", "slots in use", "published", "dropped", "hook errors", "rejected"
    )
    for rank in ranks:
        info, stats = rank.info, rank.stats
        counters = stats.counters
        table.add_row(
            str(rank.rank.rank),
            str(info.tp_rank),
            str(info.dp_rank),
            str(info.pid),
            rank.rank.target.host,
            f"{info.request_port}/{info.stream_port}",
            str(stats.step),
            str(counters.unobserved_steps),
            f"{stats.mamba_slots_in_use}/{stats.mamba_pool_size}",
            str(counters.published),
            str(counters.dropped),
            str(stats.hook_errors),
            str(counters.rejected_requests),
        )
    stdout.print(table)
    for rank in ranks:
        if rank.info.verify != "off" or rank.stats.verify.verified or rank.stats.verify.working:
            stdout.print(f"rank {rank.rank.rank}: {verification_counts(rank.stats.verify)}", highlight=False)


def layout_line(first: EngineInfo, ranks: int) -> str:
    """How the engine's ranks relate: which of them `tp-agree` compares."""
    if ranks == 1:
        return "1 rank"
    if first.attn_dp_size > 1:
        per_group = max(first.tp_size // first.attn_dp_size, 1)
        compared = (
            "tp-agree compares the ranks of each group"
            if per_group > 1
            else "no two ranks share their batches: tp-agree has nothing to compare"
        )
        return f"{ranks} ranks: tp {first.tp_size} in {first.attn_dp_size} attention DP groups of {per_group}, each scheduling its own requests ({compared})"
    return f"{ranks} ranks (tp {first.tp_size}): each its own tree, slots and requests, which must agree (tp-agree); slot contents are each rank's shard"


def verification_setting(info: EngineInfo) -> str:
    """Whether the engine verifies cached states (T2), and its budget."""
    if info.verify == "off":
        return "T2 verification off (MCINSPECT_VERIFY=engine turns it on; `mcinspect verify` works either way)"
    return (
        f"T2 verification by the {info.verify} oracle, within {info.verify_share:.0%} of the scheduler's busy time "
        f"and {info.verify_rate:g} references a second"
    )


def state_shapes_line(info: EngineInfo) -> str:
    """One slot's mamba state: conv and temporal shapes with dtypes, and its bytes."""
    convs = ", ".join(f"{list(shape)} {dtype}" for shape, dtype in zip(info.conv_shapes, info.conv_dtypes))
    return f"conv {convs}; temporal {list(info.temporal_shape)} {info.temporal_dtype}; {info.state_bytes_per_slot:,} bytes"


def verification_counts(v: VerifyStats) -> str:
    per = f" ({1000 * v.seconds / (v.verified + v.working):.1f} ms each)" if v.verified + v.working else ""
    return (
        f"{v.verified} cached and {v.working} working states verified, {v.mismatches} mismatches, {v.queued} queued, "
        f"{v.gone} gone before their turn, {v.no_room} waits for room, {v.failed} failed; "
        f"{v.seconds:.2f} s of references{per}, {v.tokens:,} tokens"
    )


TABLE_GROUPS = 200
"""Groups a terminal table shows; the rest are counted (--json, or a pipe, lists them all)."""


class ViolationReport:
    """What `check` found: groups of one cause (a table on a terminal, plain lines in a pipe or
    file, reasons never cut; or JSON lines), or with `ungrouped` JSON lines as found."""

    def __init__(self, json_out: bool, ungrouped: bool = False) -> None:
        self.json_out, self.ungrouped = json_out, ungrouped
        self.groups = ViolationGroups()

    @property
    def count(self) -> int:
        """Violations seen (occurrences, not groups)."""
        return self.groups.occurrences

    def add(self, violation: Violation) -> None:
        if self.json_out and self.ungrouped:
            self.groups.occurrences += 1
            typer.echo(msgspec.json.encode(violation).decode())
        else:
            self.groups.add(violation)

    def finish(self) -> None:
        groups = self.groups.groups
        if self.json_out:
            if not self.ungrouped:
                sys.stdout.write("".join(msgspec.json.encode(group).decode() + "\n" for group in groups))
                sys.stdout.flush()
            return
        if not self.count:
            stderr.print("[green]no violations[/]")
            return
        title = f"{self.count:,} violations in {len(groups):,} groups (one cause each: same check, slots and nodes)"
        if stdout.is_terminal:
            self._table(title, groups)
        else:
            sys.stdout.write(_plain_groups(title, groups))
            sys.stdout.flush()

    def _table(self, title: str, groups: list[ViolationGroup]) -> None:
        table = Table("steps", "seen", "check", "nodes", "slots", "requests", "reason", title=title, title_justify="left")
        table.columns[-1].overflow = "fold"  # wrapped, never cut
        for group in groups[:TABLE_GROUPS]:
            table.add_row(
                _steps(group), f"{group.repeats}x", group.check, _ids(group.nodes), _ids(group.slots), _ids(group.rids), group.reason
            )
        stdout.print(table)
        if len(groups) > TABLE_GROUPS:
            stderr.print(f"{len(groups) - TABLE_GROUPS:,} more groups not shown: --json, or a pipe, lists them all", highlight=False)


def _plain_groups(title: str, groups: list[ViolationGroup]) -> str:
    """One line a group, tab-separated, nothing cut: linear in the groups, for files and pipes."""
    lines = [title, "steps\tseen\tcheck\tnodes\tslots\trequests\treason"]
    for g in groups:
        lines.append(f"{_steps(g)}\t{g.repeats}\t{g.check}\t{_all(g.nodes)}\t{_all(g.slots)}\t{_all(g.rids)}\t{g.reason}")
    return "\n".join(lines) + "\n"


def _steps(group: ViolationGroup) -> str:
    return str(group.first_step) if group.first_step == group.last_step else f"{group.first_step}..{group.last_step}"


def _ids(values: Sequence[object]) -> str:
    return ", ".join(str(v) for v in values[:4]) + (f" (+{len(values) - 4})" if len(values) > 4 else "")


def _all(values: Sequence[object]) -> str:
    return ",".join(str(v) for v in values) or "-"


def print_checks(specs: Iterable[CheckSpec]) -> None:
    table = Table("check", "invariant", "catches", "upstream", "cannot see", title="mcinspect checks", title_justify="left")
    for spec in specs:
        table.add_row(spec.name, spec.invariant, spec.description, ", ".join(spec.targets), spec.blind_to)
    stdout.print(table)


def print_faults(faults: Iterable[Fault]) -> None:
    """One block per fault: name, upstream reference, where it applies, the check that must fire."""
    for fault in faults:
        where = ", ".join(fault.strategies) + (f", page {', '.join(map(str, fault.page_sizes))}" if fault.page_sizes else "")
        stdout.print(f"[bold]{fault.name}[/]  {fault.upstream}", highlight=False)
        stdout.print(
            f"  caught by: {', '.join(fault.expected_checks)}   applies to: {where}; models {', '.join(fault.families)}",
            highlight=False,
        )
        stdout.print(f"  {fault.description}", highlight=False)
        stdout.print()


def print_hooks(selection: Any) -> None:
    """`mcinspect hooks`: a generations.Selection as a table."""
    from mcinspect_engine_hooks.generations import installed_release

    generation = selection.generation
    used = {h.target for h in selection.hooks}
    table = Table("sglang.srt. method", "hook", "kind", "in this sglang", title_justify="left")
    table.columns[0].overflow = table.columns[3].overflow = "fold"
    table.title = f"sglang {installed_release()}: the {generation.name} adapter (tested on {', '.join(generation.releases)})"
    for hook in generation.hooks:
        if hook.target in used:
            status = "yes"
        else:
            stand_in = next((f for f in hook.fallbacks if f.target in used), None)
            status = f"no: {stand_in.target} ({stand_in.when}) instead" if stand_in else f"[red]no: skipped[/]; lost: {escape(hook.lost)}"
        table.add_row(hook.target, hook.when, hook.kind, status)
    stdout.print(table)
    if selection.skipped:
        stdout.print(selection.skipped_line(), highlight=False)
    for other in selection.passed_over:  # e.g. 0.5.16: a UnifiedRadixCache the adapter above refuses
        stdout.print(
            f"not read in this sglang: {other}; an engine whose scheduler builds that generation's cache "
            "runs with the hooks off and says so in its log",
            highlight=False,
        )
