"""CLI input errors: one line on stderr, exit code 2, and no engine started."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcinspect.cli import app

runner = CliRunner()


def test_unknown_strategy_is_a_usage_error() -> None:
    result = runner.invoke(app, ["demo", "--strategy", "ping_pong"])
    assert result.exit_code == 2
    assert "ping_pong" in result.output and "extra_buffer" in result.output


def test_model_families_are_the_engines_and_a_wrong_one_is_a_usage_error() -> None:
    from mcinspect.cli import Model
    from mcinspect_engine_hooks.families import DEFAULT_FAMILY, FAMILIES

    assert [m.value for m in Model] == list(FAMILIES) and DEFAULT_FAMILY == "qwen3-next"
    result = runner.invoke(app, ["demo", "--headless", "--model", "mamba3"])
    assert result.exit_code == 2
    assert "mamba3" in result.output and "nemotron-h" in result.output


def test_a_fault_on_a_family_without_its_mechanism_is_refused_before_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcinspect_engine_hooks.cpu_engine.faults import FAULTS, Fault

    only_mamba2 = Fault("only-mamba2", "test", "test", ("T2-recompute",), ("extra_buffer",), (), families=("nemotron-h",))
    monkeypatch.setitem(FAULTS, only_mamba2.name, only_mamba2)  # every real fault exists in every family today
    result = runner.invoke(app, ["demo", "--headless", "--model", "qwen3-next", "--fault", only_mamba2.name])
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error:") and "exists in nemotron-h, not qwen3-next" in last and "--model" in last


def test_port_in_use_fails_fast_with_the_fix() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(app, ["demo", "--headless", "--port", str(port)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error:") and f"port {port}" in lines[-1] and "--port" in lines[-1]


def test_help_teaches_the_options() -> None:
    result = runner.invoke(app, ["demo", "--help"])
    assert result.exit_code == 0
    for option in ("--strategy", "--page-size", "--seed", "--requests", "--headless"):
        assert option in result.output


def test_lazy_without_overlap_is_refused_before_start() -> None:
    result = runner.invoke(app, ["demo", "--headless", "--strategy", "extra_buffer_lazy", "--no-overlap"])
    assert result.exit_code == 2
    assert "needs overlap" in result.output.strip().splitlines()[-1]


def test_demo_without_a_terminal_asks_for_headless() -> None:
    result = runner.invoke(app, ["demo"])  # CliRunner's stdout is not a terminal
    assert result.exit_code == 2
    assert "--headless" in result.output.strip().splitlines()[-1]


def test_snapshot_format_and_option_errors(tmp_path: Path) -> None:
    some_file = tmp_path / "snap.json"
    some_file.write_text("{}")
    for args, says in (
        (["snapshot", "7777", "--format", "bogus"], "--format bogus: pick json or tree"),
        (["snapshot", "7777", "--max-nodes", "5"], "--max-nodes applies to --format tree"),
        (["snapshot", str(some_file)], "--format tree` prints a file's tree"),
        (["snapshot", str(some_file), "--format", "tree"], "not a Snapshot"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, args
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], (args, result.output)


def test_a_bad_hooks_setting_is_refused_before_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin would only log it in the engine's processes and run without hooks."""
    monkeypatch.setenv("MCINSPECT_LIVE_BUDGET", "2")
    result = runner.invoke(app, ["demo", "--headless"])
    assert result.exit_code == 2
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error:") and "MCINSPECT_LIVE_BUDGET='2'" in last


def test_demo_summary_names_the_family_and_its_state_layout(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from rich.console import Console

    from mcinspect import cli_output
    from mcinspect.cli_output import print_summary
    from mcinspect.demo import DemoSummary
    from mcinspect.schema import SCHEMA_VERSION, EngineInfo

    monkeypatch.setattr(cli_output, "stdout", Console(width=250))  # one table row a line
    without_hooks = DemoSummary("extra_buffer", 16, True, 0, 1.0, model="nemotron-h")
    print_summary(without_hooks)
    out = capsys.readouterr().out
    assert "nemotron-h" in out and "mamba2: conv x | B | C (channels x kernel-1), temporal [heads, head dim, state dim]" in out
    info = EngineInfo(
        schema_version=SCHEMA_VERSION, sglang_version="0.5.23", model_path="/m/tiny-nemotron-h", strategy="extra_buffer",
        page_size=16, overlap=True, tree_core="python", full_tree_detail=True, mamba_pool_size=32, kv_pool_tokens=3072,
        tp_rank=0, dp_rank=0, pid=1, request_port=7777, stream_port=7778, model_family="nemotron-h",
        state_layout="mamba2: conv x | B | C (channels x kernel-1), temporal [heads, head dim, state dim]",
        conv_shapes=((2, 128, 3),), conv_dtypes=("bfloat16",), temporal_shape=(2, 4, 16, 16), temporal_dtype="float32",
        state_bytes_per_slot=9728,
    )  # fmt: skip
    print_summary(replace(without_hooks, engine=info))
    out = capsys.readouterr().out
    assert "/m/tiny-nemotron-h" in out
    assert "conv [2, 128, 3] bfloat16; temporal [2, 4, 16, 16] float32; 9,728 bytes" in out


@pytest.mark.parametrize("command", ["demo", "verify", "check", "snapshot"])
def test_help_paragraphs_fill_an_80_column_terminal(command: str) -> None:
    """A docstring's hard line breaks are not kept: no description line ends early mid-paragraph."""
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    description = result.output.split("╭")[0].splitlines()[3:]  # past the usage line
    paragraphs = "\n".join(line.rstrip() for line in description).strip().split("\n\n")
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        assert all(len(line) >= 60 for line in lines[:-1]), paragraph
