"""An engine on an sglang release the adapters do not read: the plugin's inspector port answers
`mcinspect info` (and every other request) with the one-line reason, exit 2."""

from __future__ import annotations

import socket
from types import SimpleNamespace

from typer.testing import CliRunner

from mcinspect.cli import app
from mcinspect_engine_hooks.config import HooksConfig
from mcinspect_engine_hooks.unsupported import UnsupportedInspector

REASON = "sglang 0.5.16 is not supported by mcinspect (it reads 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23, 0.5.12, 0.5.13, 0.5.14, 0.5.15); no generation fits: unified-tree-core (lacks ...)"


def _free_port_pair() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_info_and_snapshot_say_why_in_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MCINSPECT_KEY_DIR", str(tmp_path))
    port = _free_port_pair()
    scheduler = SimpleNamespace(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, dp_rank=None, page_size=1, tree_cache=None)
    inspector = UnsupportedInspector(scheduler, HooksConfig(base_port=port), REASON)
    try:
        info = CliRunner().invoke(app, ["info", str(port)])
        snapshot = CliRunner().invoke(app, ["snapshot", str(port), "-o", str(tmp_path / "s.json")])
    finally:
        inspector.server.close()
    for result in (info, snapshot):
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and REASON in lines[0], result.output
    assert not (tmp_path / "s.json").exists()


def test_a_rust_tree_core_without_path_info_is_refused_with_the_way_out() -> None:
    """sglang 0.5.21's Rust core has no collect_path_info: no request path can be read."""
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    from mcinspect_engine_hooks.generations import UNIFIED_TREE_CORE

    def cache(core: object) -> SimpleNamespace:
        return SimpleNamespace(tree_core=core, components={ComponentType.MAMBA: object()})

    rust_0521 = cache(SimpleNamespace(all_mamba_values_flatten=lambda: None))
    assert "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python" in UNIFIED_TREE_CORE.refusal(rust_0521)
    assert UNIFIED_TREE_CORE.refusal(cache(SimpleNamespace(collect_path_info=lambda ids: []))) == ""
    assert UNIFIED_TREE_CORE.refusal(cache(SimpleNamespace(_node_arena={}))) == ""
    assert "not a UnifiedRadixCache" in UNIFIED_TREE_CORE.refusal(SimpleNamespace())


def test_a_unified_cache_under_the_mamba_radix_cache_generation_is_refused_in_one_line() -> None:
    """0.5.16-0.5.20 ship MambaRadixCache's methods but build a UnifiedRadixCache: where the
    unified generation does not fit, the MambaRadixCache one is picked and refuses at start."""
    from mcinspect_engine_hooks.generations import MAMBA_RADIX_CACHE

    assert MAMBA_RADIX_CACHE.refusal(SimpleNamespace(root_node=None, full_lru_list=None, mamba_lru_list=None)) == ""
    reason = MAMBA_RADIX_CACHE.refusal(SimpleNamespace(tree_core=object()))
    assert "is not supported by mcinspect" in reason and "lacks" in reason and "\n" not in reason


def test_a_release_without_plugin_hooks_is_read_through_the_stand_in_or_refused(monkeypatch) -> None:
    """Before 0.5.11 sglang has no `sglang.srt.plugins` and never calls mcinspect: the import-time
    stand-in (mcinspect_pre_plugins.pth) reaches it; where that file is missing the embedded
    engine refuses before it starts (launcher.start_engine) and says why in one line."""
    from mcinspect_engine_hooks import generations

    assert generations.plugin_refusal() == ""  # this sglang has its HookRegistry
    monkeypatch.setattr(generations, "resolves", lambda target: not target.startswith("plugins."))
    assert generations._pre_plugins_pth_installed()  # the wheel ships it into this venv
    assert generations.plugin_refusal() == ""  # no plugins, but the stand-in reaches the engine
    monkeypatch.setattr(generations, "_pre_plugins_pth_installed", lambda: False)
    reason = generations.plugin_refusal()
    assert "no plugin hooks" in reason and "mcinspect_pre_plugins.pth" in reason and "\n" not in reason
    assert reason.endswith("The hooks stay off")
