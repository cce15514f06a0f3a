"""The tiny model writers: deterministic bytes, sglang-readable configs, slow state decay, cached."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from memory_curve import memory_curve

from mcinspect.checks.recompute import tolerances
from mcinspect_engine_hooks.cpu_engine.oracle import RecomputeOracle
from mcinspect_engine_hooks.cpu_engine.tiny_model import TINY_SPECS, TinyQwen3NextSpec, ensure_tiny_model, write_tiny_model
from mcinspect_engine_hooks.families import FAMILIES, get_family

TOLERANCE = tolerances("engine", "extend")["temporal"]
"""The tightest T2 tolerance: the engine oracle's for a state a prefill wrote."""


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_family_has_a_tiny_model() -> None:
    assert TINY_SPECS.keys() == FAMILIES.keys()


@pytest.mark.parametrize("family", FAMILIES)
def test_same_spec_writes_identical_weights_and_another_seed_others(family: str, tmp_path: Path) -> None:
    spec = TINY_SPECS[family]()
    write_tiny_model(spec, tmp_path / "a")
    write_tiny_model(spec, tmp_path / "b")
    write_tiny_model(replace(spec, seed=1), tmp_path / "c")
    assert _digest(tmp_path / "a/model.safetensors") == _digest(tmp_path / "b/model.safetensors")
    assert _digest(tmp_path / "a/model.safetensors") != _digest(tmp_path / "c/model.safetensors")
    assert spec.cache_key() != replace(spec, seed=1).cache_key()


@pytest.mark.parametrize("family", FAMILIES)
def test_config_names_the_familys_architecture(family: str, tmp_path: Path) -> None:
    write_tiny_model(TINY_SPECS[family](), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == [get_family(family).architecture]


def test_qwen3_next_and_qwen3_5_configs_carry_both_layer_rules(tmp_path: Path) -> None:
    for family in ("qwen3-next", "qwen3.5"):
        write_tiny_model(TINY_SPECS[family](), tmp_path / family)
        config = json.loads((tmp_path / family / "config.json").read_text())
        # sglang derives layer kinds from full_attention_interval, transformers from layer_types
        assert config["layer_types"] == ["linear_attention", "linear_attention", "full_attention"]
        assert config["full_attention_interval"] == 3


def test_nemotron_h_config_uses_the_keys_sglang_reads(tmp_path: Path) -> None:
    """sglang 0.5.23's NemotronHConfig rejects transformers' own layer names ("linear_attention")
    and reads n_groups / conv / chunk size under their legacy names."""
    write_tiny_model(TINY_SPECS["nemotron-h"](), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert "layers_block_type" not in config and config["hybrid_override_pattern"] == "M-M*-"
    assert (config["mamba_n_groups"], config["mamba_d_conv"], config["mamba_chunk_size"]) == (2, 4, 64)
    from transformers import AutoConfig

    reread = AutoConfig.from_pretrained(tmp_path)  # and transformers reads them back
    assert reread.layers_block_type == ["linear_attention", "mlp", "linear_attention", "full_attention", "mlp"]
    assert (reread.n_groups, reread.conv_kernel, reread.chunk_size) == (2, 4, 64)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_models_remember_a_wrong_state(family: str) -> None:
    """Random weights forget in a few tokens; the tiny models must not: a zeroed or another
    prefix's state is still >= 10x T2's tolerance from the right one 256 tokens later."""
    oracle = RecomputeOracle(ensure_tiny_model(family))
    for perturbation in ("zero", "other-prefix"):
        at_0, *_, at_256 = memory_curve(oracle, perturbation)
        print(f"{family} {perturbation}: relative L2 {at_0:.3f} at once, {at_256:.3f} after 256 tokens")
        assert at_0 > 0.9 and at_256 >= 10 * TOLERANCE, (perturbation, at_256)


def test_ensure_reuses_cache_and_rewrites_an_incomplete_one(tmp_path: Path) -> None:
    first = ensure_tiny_model(cache_dir=tmp_path)
    assert first.name.startswith(f"tiny-qwen3-next-{TinyQwen3NextSpec().cache_key()}")  # the default family
    weights = first / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert ensure_tiny_model(cache_dir=tmp_path) == first
    assert weights.stat().st_mtime_ns == mtime  # reused, not rewritten
    original = _digest(weights)
    weights.unlink()  # a crash mid-write, or a user cleaning up
    again = ensure_tiny_model(cache_dir=tmp_path)
    assert again == first and _digest(again / "model.safetensors") == original
    assert [p.name for p in tmp_path.joinpath("models").iterdir()] == [first.name]  # no scratch dirs left


def test_unknown_family_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model family 'mamba3'"):
        ensure_tiny_model("mamba3", cache_dir=tmp_path)


def test_nemotron_h_written_by_transformers_5_12_reads_as_5_19s(tmp_path: Path) -> None:
    """The MambaRadixCache releases' venvs pin transformers 5.12.1: its layer kinds ("mamba",
    "attention") give the same pattern, and its embedding key is renamed to the one sglang loads."""
    from types import SimpleNamespace

    import torch
    from safetensors.torch import load_file, save_file

    from mcinspect_engine_hooks.cpu_engine.tiny_nemotron_h import _embeddings_as_sglang_reads_them, sglang_keys

    kinds = SimpleNamespace(
        layers_block_type=["mamba", "mlp", "mamba", "attention", "mlp"],
        n_groups=2,
        conv_kernel=4,
        expand=2,
        chunk_size=64,
        time_step_min=1e-9,
    )
    assert sglang_keys(kinds)["hybrid_override_pattern"] == "M-M*-"
    embedding = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    save_file(
        {"backbone.embedding.weight": embedding, "lm_head.weight": embedding + 1}, tmp_path / "model.safetensors", metadata={"format": "pt"}
    )
    _embeddings_as_sglang_reads_them(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert saved.keys() == {"backbone.embeddings.weight", "lm_head.weight"}
    assert torch.equal(saved["backbone.embeddings.weight"], embedding)
