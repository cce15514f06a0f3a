"""How the CLI talks to a person: one-line errors, progress on stderr, the demo summary."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig

    from .demo import DemoSummary

stderr = Console(stderr=True)
stdout = Console()


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `error: message` on one line to stderr and exit with `code`."""
    stderr.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def progress(config: EmbeddedEngineConfig, total: int) -> Iterator[tuple[Callable[[float], None], Callable[[int], None]]]:
    """Show engine start-up, then workload progress; yields the two callbacks run_demo takes."""
    overlap = "on" if config.effective_overlap else "off"
    stderr.print(
        f"mcinspect demo: {config.strategy}, page {config.page_size}, overlap {overlap}, seed {config.seed}, "
        f"{total} requests; inspector on 127.0.0.1:{config.inspector_port}",
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


def summary_dict(summary: DemoSummary) -> dict[str, Any]:
    """The summary as plain JSON-able data, derived figures included."""
    data = {key: value for key, value in vars(summary).items() if key != "stats"}
    data["hit_rate"] = round(summary.hit_rate, 4)
    data["generated_tokens_per_s"] = round(summary.generated_tokens_per_s, 2)
    data["processed_tokens_per_s"] = round(summary.processed_tokens_per_s, 2)
    data["stats"] = msgspec.to_builtins(summary.stats) if summary.stats is not None else None
    return data


def print_summary(summary: DemoSummary) -> None:
    table = Table(title="mcinspect demo summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
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
    table.add_row("engine start", f"{summary.engine_start_s:.1f} s")
    table.add_row("output digest", f"{summary.output_digest} (same seed, same digest)")
    stdout.print(table)
