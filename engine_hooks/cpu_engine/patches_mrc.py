"""CPU-engine patches for the MambaRadixCache releases (sglang 0.5.12-0.5.15), where the ops
patches.py replaces sit elsewhere. Applied by patches.install() (MCINSPECT_CPU_ENGINE=1 only),
each a no-op on a release without its target."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any


def validate_extra_buffer_off_gpu(original: Callable[..., Any]) -> Callable[..., Any]:
    """Reason: these releases refuse extra_buffer in `ServerArgs._validate_mamba_extra_buffer`
    with `assert is_cuda() or is_musa() or is_npu()` (later ones moved the test to
    `_platform_supports_mamba_cache_extra_buffer`, patched in patches.py); the CPU engine runs
    its state tracking with torch ops. Every other assertion of the validator still runs: only
    the platform test answers True, for the call's duration."""

    @functools.wraps(original)
    def validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        module = sys.modules[original.__module__]
        platform_test = module.is_cuda
        module.is_cuda = lambda: True
        try:
            return original(self, *args, **kwargs)
        finally:
            module.is_cuda = platform_test

    return validate


WRAPPERS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "sglang.srt.server_args": {"ServerArgs._validate_mamba_extra_buffer": validate_extra_buffer_off_gpu},
}
"""Module -> {Class.method: wrapper factory}, applied right after the module executes when the
release has the method."""
