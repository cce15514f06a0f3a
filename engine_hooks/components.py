"""sglang's component types of the unified cache (`FULL`, `MAMBA`: indices into a node's
`component_data`), from wherever this release keeps them: `unified_cache.component_type`
(0.5.17 on), the `unified_cache_components` package (0.5.16). None on releases with neither
(the MambaRadixCache readers do not use them)."""

from __future__ import annotations

from typing import Any

ComponentType: Any
try:
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
except ModuleNotFoundError:
    try:
        from sglang.srt.mem_cache.unified_cache_components.tree_component import ComponentType
    except ModuleNotFoundError:
        ComponentType = None

FULL: Any = ComponentType.FULL if ComponentType is not None else None
MAMBA: Any = ComponentType.MAMBA if ComponentType is not None else None
