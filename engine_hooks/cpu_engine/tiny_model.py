"""The tiny random-weight models of the embedded engine, written locally and deterministically.

The embedded engine needs a real hybrid model (linear-attention + full-attention layers) of
each family it serves that sglang loads like any other checkpoint, without a hub.
transformers writes the config and the safetensors from a fixed seed, with slowly decaying
recurrent states (state_memory.py); the result is cached in the user cache dir and rewritten
when missing or incomplete. Same spec + same seed -> byte-identical weights.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..families import DEFAULT_FAMILY, get_family
from .tiny_nemotron_h import TinyNemotronHSpec
from .tiny_qwen3_5 import TinyQwen35Spec
from .tiny_qwen3_next import TinyQwen3NextSpec
from .tiny_spec import MODEL_FILES, WRITER_VERSION, TinySpec

__all__ = [
    "MODEL_FILES", "TINY_SPECS", "WRITER_VERSION", "TinyNemotronHSpec", "TinyQwen35Spec", "TinyQwen3NextSpec",
    "TinySpec", "default_cache_dir", "ensure_tiny_model", "write_tiny_model",
]  # fmt: skip

TINY_SPECS: dict[str, type[TinySpec]] = {spec.family: spec for spec in (TinyQwen3NextSpec, TinyNemotronHSpec, TinyQwen35Spec)}
"""The default spec of each family (`families.FAMILIES` keys)."""


def default_cache_dir() -> Path:
    """`$MCINSPECT_CACHE_DIR`, else `$XDG_CACHE_HOME/mcinspect`, else `~/.cache/mcinspect`."""
    explicit = os.environ.get("MCINSPECT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mcinspect"


def ensure_tiny_model(family: str = DEFAULT_FAMILY, *, spec: TinySpec | None = None, cache_dir: Path | None = None) -> Path:
    """Return the directory of the tiny model of `family` (or of `spec`), writing it first if missing."""
    spec = spec or TINY_SPECS[get_family(family).name]()
    target = (cache_dir or default_cache_dir()) / "models" / f"tiny-{spec.family}-{spec.cache_key()}"
    if all((target / name).is_file() for name in MODEL_FILES):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename: concurrent writers (parallel tests) never see a
    # half-written model, and the last rename wins with identical content.
    scratch = Path(tempfile.mkdtemp(prefix=f".tiny-{spec.family}-", dir=target.parent))
    try:
        write_tiny_model(spec, scratch)
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def write_tiny_model(spec: TinySpec, out_dir: Path) -> None:
    """Write config.json + model.safetensors for `spec` into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    spec.write(out_dir)
