"""Finding and running a Graphviz `dot` binary.

Where it comes from, first match wins:

| source | how |
|---|---|
| `MCINSPECT_DOT` | an explicit path (or a name on PATH) |
| the system | `dot` on PATH (Graphviz from the OS) |
| PyPI | `graphviz-pure` on PATH or next to this Python (`pip install graphviz-pure`: a self-contained static binary of a Rust port of Graphviz 16.1, no system libraries) |
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Literal

from ._errors import DotFailed, DotNotFound, DotTimeout

DOT_ENV = "MCINSPECT_DOT"
PURE_NAME = "graphviz-pure"
DEFAULT_TIMEOUT_S = 60.0

Format = Literal["svg", "png"]


@dataclass(frozen=True)
class DotBinary:
    path: str
    source: Literal["env", "system", "graphviz-pure"]


def find_dot() -> DotBinary:
    """The binary to run (see the module docstring); raises DotNotFound with the fix."""
    explicit = os.environ.get(DOT_ENV)
    if explicit:
        found = shutil.which(explicit)
        if found is None:
            raise DotNotFound(f"{DOT_ENV}={explicit} is not an executable: point it at a Graphviz dot, or unset it")
        return DotBinary(found, "env")
    system = shutil.which("dot")
    if system is not None:
        return DotBinary(system, "system")
    # A venv used without activation has its scripts beside the interpreter, not on PATH.
    pure = shutil.which(PURE_NAME) or shutil.which(PURE_NAME, path=os.path.dirname(sys.executable))
    if pure is not None:
        return DotBinary(pure, "graphviz-pure")
    raise DotNotFound(
        f"no Graphviz dot found: `pip install {PURE_NAME}` (no system packages needed), install Graphviz, "
        f"or set {DOT_ENV}; `--format dot` needs none"
    )


def run_dot(source: str, fmt: Format, *, timeout_s: float = DEFAULT_TIMEOUT_S, binary: DotBinary | None = None) -> bytes:
    """Lay out DOT `source` and return the `fmt` output. Raises DotNotFound, DotFailed, DotTimeout."""
    dot = binary or find_dot()
    try:
        done = subprocess.run([dot.path, f"-T{fmt}"], input=source.encode(), capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise DotTimeout(f"{dot.path} took more than {timeout_s:g} s: lower --max-nodes or use --focus") from None
    except OSError as exc:
        raise DotFailed(f"cannot run {dot.path}: {exc.strerror}: fix or unset {DOT_ENV}") from None
    if done.returncode != 0:
        errors = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()]
        first = errors[0] if errors else "no message"
        raise DotFailed(f"{dot.path} exited with {done.returncode}: {first} (try `--format dot` to inspect the source)")
    return done.stdout
