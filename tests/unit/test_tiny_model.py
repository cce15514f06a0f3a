"""The tiny Qwen3-Next writer: deterministic bytes, cached, regenerated when incomplete."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mcinspect_engine_hooks.cpu_engine.tiny_model import TinyQwen3NextSpec, ensure_tiny_model, write_tiny_model


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_spec_writes_identical_weights(tmp_path: Path) -> None:
    write_tiny_model(TinyQwen3NextSpec(), tmp_path / "a")
    write_tiny_model(TinyQwen3NextSpec(), tmp_path / "b")
    assert _digest(tmp_path / "a/model.safetensors") == _digest(tmp_path / "b/model.safetensors")


def test_other_seed_writes_other_weights(tmp_path: Path) -> None:
    write_tiny_model(TinyQwen3NextSpec(seed=0), tmp_path / "a")
    write_tiny_model(TinyQwen3NextSpec(seed=1), tmp_path / "b")
    assert _digest(tmp_path / "a/model.safetensors") != _digest(tmp_path / "b/model.safetensors")


def test_config_is_a_hybrid_that_sglang_can_map(tmp_path: Path) -> None:
    write_tiny_model(TinyQwen3NextSpec(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3NextForCausalLM"]
    # sglang derives layer kinds from full_attention_interval, transformers from layer_types
    assert config["layer_types"] == ["linear_attention", "linear_attention", "full_attention"]
    assert config["full_attention_interval"] == 3


def test_ensure_reuses_cache_and_rewrites_an_incomplete_one(tmp_path: Path) -> None:
    first = ensure_tiny_model(cache_dir=tmp_path)
    weights = first / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert ensure_tiny_model(cache_dir=tmp_path) == first
    assert weights.stat().st_mtime_ns == mtime  # reused, not rewritten
    original = _digest(weights)
    weights.unlink()  # a crash mid-write, or a user cleaning up
    again = ensure_tiny_model(cache_dir=tmp_path)
    assert again == first and _digest(again / "model.safetensors") == original
    assert [p.name for p in tmp_path.joinpath("models").iterdir()] == [first.name]  # no scratch dirs left
