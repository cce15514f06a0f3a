"""What every tiny model spec provides: its family, a cache key, and a writer."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

WRITER_VERSION = 4
"""Bumped when a writer changes what it writes; part of every cache key (4: slow state decay)."""

MODEL_FILES = ("config.json", "model.safetensors")
"""What a complete model directory holds (checked before reuse)."""


@dataclass(frozen=True)
class TinySpec:
    """Dimensions and seed of one tiny model; every field goes into the cache key."""

    family: ClassVar[str]
    """`families.FAMILIES` key."""

    def cache_key(self) -> str:
        blob = json.dumps({**asdict(self), "family": self.family, "writer": WRITER_VERSION}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def write(self, out_dir: Path) -> None:
        """Write config.json + model.safetensors into `out_dir` (deterministic bytes)."""
        raise NotImplementedError


def save(model: object, out_dir: Path) -> None:
    """save_pretrained as safetensors, then check both files are there."""
    model.save_pretrained(out_dir, safe_serialization=True)  # type: ignore[attr-defined]
    missing = [name for name in MODEL_FILES if not (out_dir / name).is_file()]
    if missing:
        raise RuntimeError(f"transformers did not write {missing} into {out_dir}")


def rewrite_config(out_dir: Path, update: dict, drop: tuple[str, ...] = ()) -> None:
    """Edit the config.json transformers wrote: sglang reads some keys under other names."""
    path = out_dir / "config.json"
    config = json.loads(path.read_text())
    for key in drop:
        config.pop(key, None)
    config.update(update)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
