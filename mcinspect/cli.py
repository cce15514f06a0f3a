"""The `mcinspect` command line. Exit codes: 0 ok, 1 violations found, 2 bad input or usage."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import typer

from .cli_output import fail, print_summary, progress, summary_dict

app = typer.Typer(
    help="Inspect the mamba (SSM) prefix cache of a live SGLang engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Strategy(str, enum.Enum):
    no_buffer = "no_buffer"
    extra_buffer = "extra_buffer"
    extra_buffer_lazy = "extra_buffer_lazy"


@app.callback()
def main() -> None:
    """Inspect the mamba (SSM) prefix cache of a live SGLang engine.

    Start with `mcinspect demo --headless`: the real SGLang engine on this CPU with a tiny
    Qwen3-Next, driven by a workload that hits, extends and evicts the cache.
    """


@app.command()
def demo(
    strategy: Annotated[Strategy, typer.Option(help="--mamba-radix-cache-strategy of the engine.")] = Strategy.extra_buffer,
    page_size: Annotated[int, typer.Option(min=1, help="KV page size (no_buffer needs 1).")] = 16,
    seed: Annotated[int, typer.Option(help="Seeds the workload and the engine: same seed, same outputs.")] = 0,
    requests: Annotated[int, typer.Option(min=1, help="How many requests the workload sends.")] = 40,
    port: Annotated[int, typer.Option(help="Inspector port of the engine's hooks (scheduler rank 0).")] = 7777,
    overlap: Annotated[bool, typer.Option(help="Overlap scheduling (forced off for no_buffer, which refuses it).")] = True,
    headless: Annotated[bool, typer.Option(help="No TUI: print progress and a summary (the only mode until the TUI lands).")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object on stdout.")] = False,
    engine_log_level: Annotated[str, typer.Option(help="sglang's log level (info shows every batch).")] = "error",
) -> None:
    """Run the real SGLang engine on the CPU with a tiny Qwen3-Next and a cache workload.

    The workload mixes shared system prefixes, multi-turn conversations, branches from the
    middle of earlier prompts, chunked prefill and enough unrelated prompts to force evictions.
    """
    from mcinspect_engine_hooks.cpu_engine.launcher import EmbeddedEngineConfig, EngineDied, EngineStartError

    from .client import EngineRefused, EngineUnreachable
    from .demo import run_demo

    if not headless:
        fail("the TUI is not available yet; run with --headless")
    config = EmbeddedEngineConfig(
        strategy=strategy.value,
        page_size=page_size,
        seed=seed,
        overlap=overlap,
        inspector_port=port,
        log_level=engine_log_level,
    )
    try:
        with progress(config, requests) as (on_started, on_wave):
            summary = run_demo(config, requests, on_engine_started=on_started, on_wave_done=on_wave)
    except (EngineStartError, EngineDied, EngineUnreachable, EngineRefused) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if json_out:
        typer.echo(json.dumps(summary_dict(summary)))
    else:
        print_summary(summary)
