"""The adapter seam: which sglang generation this process runs, found by feature detection
(the classes and methods the generation's hook table names, never the version string).

A `Generation` is the read-only protocol `Capture` is written against: a tree view for the
scheduler's tree cache (`TreeView`), the pools-and-requests reader (a module with the
functions of pools_0523) and its hook table. `select()` resolves every hook of each generation
in turn and takes the first whose required hooks all exist; the hooks that do not resolve are
skipped (with what that costs: `Hook.lost`), a row's `fallback` standing in where the release
has it. No generation fits: `Unsupported`, one line for the engine's log and `mcinspect info`.

| generation | releases tested | tree | read by |
|---|---|---|---|
| unified-tree-core | 0.5.17, 0.5.18, 0.5.19, 0.5.20, 0.5.21, 0.5.22, 0.5.23 | UnifiedRadixCache + UnifiedTreeCore (Python core; the Rust core from 0.5.22) | adapter_0523, pools_0523, hooks_0523 |
| unified-tree-0516 | 0.5.16 | UnifiedRadixCache keeping its own UnifiedTreeNodes (no tree core; the components in `unified_cache_components`; no arena: the dirty-mark hooks keep its nodes by id) | adapter_0516, pools_0523, hooks_0516, marks_0516 |
| mamba-radix-cache | 0.5.10, 0.5.11, 0.5.12, 0.5.13, 0.5.14, 0.5.15 | MambaRadixCache (TreeNodes with their own values, locks and LRU links; no arena: the dirty-mark hooks keep its nodes by id) | adapter_mrc, pools_0523, hooks_mrc, mrc_marks |

0.5.21 differs by fallback rows (inc_lock_ref / dec_lock_ref for lock / unlock, cache_unfinished_req
for checkpoint_into_tree) and fields read where present (`req.prefix_len`, `device_prefix_len`,
`mamba_keep_idx`, `mamba_prev_track_seqlen`). 0.5.20 releases a request in one
`cache_finished_req` (insert, row free, unlock): fallback rows before / after it for
`claim_kv_row` / `on_release`. 0.5.19 as 0.5.20, its components in the modules before the rename
(`components/full_component.py`, `mamba_component.py`: fallback rows), no `track_ssm_recompute_dst`
(read where present). 0.5.18 as 0.5.19, without `evict_for_alloc` (skipped: its allocation evicts
through `evict`), its requests keeping their row and mamba fields on the `Req` (its ReqKvInfo holds
only the KV lengths: req_kv.kv_of reads the Req there). 0.5.17 as 0.5.18, its Req without
`mamba_last_track_idx` (derived, as before 0.5.16) and its decode batch without
`mamba_track_mask_cpu` / `mamba_track_buffer_indices` (req_kv.decode_track_mask / entries recompute
sglang's rule). 0.5.13 and 0.5.14 run the deferred copy-on-write in the mamba attention
backend (the `cow.copy` row's fallback), and 0.5.13 names the strategy `mamba_scheduler_strategy`
and keeps a RadixKey's tokens in `token_ids` (read where present). 0.5.12 has neither admission
groups nor the deferred copy-on-write (four rows skipped: a hit's state is copied at the match), its
MambaPool allocates (fallback rows), its pool names the kept ping-pong entry only as the "other"
one, it has no extra_buffer_lazy, its prefill track plan is appended to the batch's lists (no
entry returned) and a chunk checkpoint inserts a fork, not the donated slot (all read where
present: events_mrc, req_kv, events.prefill_track). 0.5.11 reads as 0.5.12 (the same four rows
skipped), and 0.5.10 as 0.5.11 but its idle loop calls `self_check_during_idle` (a fallback
row); 0.5.10 has no HookRegistry: registry.py stands in for it at import. 0.5.16 keeps the nodes on the cache: its node is 0.5.17's Python-core node, so
adapter_0523's records read it; with no arena, its dirty-mark hooks keep its nodes by id
(marks_0516; without them a walked tree, O(tree) per capture); its cache methods take nodes, not ids (lock and finish bodies as MambaRadixCache's),
and its InsertResult names no node (the commit hook does); its requests keep their own fields
as on 0.5.17. It still ships MambaRadixCache's methods (so it is tried before
mamba-radix-cache), and 0.5.15 already ships its UnifiedRadixCache while building a
MambaRadixCache: the int8 checkpoint pool of 0.5.16's MambaComponent (`features`) tells them
apart. Not supported (README "sglang releases"): 0.5.9 and earlier (0.5.9's own CPU path asserts
AMX: the embedded engine cannot run it); without `mcinspect_pre_plugins.pth` a release before
0.5.11 is refused before an engine starts (`plugin_refusal`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import torch

from mcinspect.schema import NodeId, NodeRecord

from . import hooks_0516, hooks_mrc
from .hooks_0523 import HOOKS, Hook


class _TreeViewBase(Protocol):
    full_detail: bool

    def slot_of(self, node_id: int) -> int | None: ...
    def path_tokens(self, node_id: int) -> list[int] | None: ...
    def state_nodes(self) -> list[int]: ...


class FullTreeView(_TreeViewBase, Protocol):
    """Every node (adapter_0523.PythonTreeView): `full_detail` True."""

    walked: bool
    """`arena()` walks the tree into a new dict each call (no arena, no dirty marks): every
    capture reads every node (0.5.16 and MambaRadixCache without their dirty-mark hooks)."""

    def arena(self) -> dict[int, Any]: ...
    def all_records(self, tombstones: Collection[int]) -> dict[NodeId, NodeRecord]: ...
    def records(self, items: Sequence[tuple[Any, int]], tombstones: Collection[int], *, once: bool = False) -> list[NodeRecord]:
        """`once`: nodes read once (a catch-up's chunk), whose derived fields are not remembered."""


class PathTreeView(_TreeViewBase, Protocol):
    """The nodes on request paths and the set of tree-owned slots (adapter_0523.RustTreeView):
    `full_detail` False."""

    def path_records(self, anchors: Iterable[tuple[int, Sequence[int]]]) -> dict[NodeId, NodeRecord]: ...
    def tree_slots(self) -> torch.Tensor: ...


TreeView = FullTreeView | PathTreeView
"""What Capture reads of the tree; it branches on `full_detail`."""


@dataclass(frozen=True)
class Generation:
    name: str
    releases: tuple[str, ...]
    """The sglang releases it is tested on (`make demo SGLANG=X`)."""
    hooks: tuple[Hook, ...]
    required: tuple[str, ...]
    """Targets without which (and without their rows' fallbacks) the generation does not fit."""
    adapter: str
    """Its tree adapter module: `refusal(tree_cache)` and `tree_view(tree_cache, sink)`."""
    pools_reader: str
    """Its pools-and-requests module (the functions and readers of pools_0523)."""
    features: tuple[str, ...] = ()
    """Names its bodies read that no row hooks (`resolves` targets), required as well."""

    def refusal(self, tree_cache: Any) -> str:
        """Why the adapter cannot read `tree_cache` ("" when it can)."""
        return str(self._module(self.adapter).refusal(tree_cache))

    def tree_view(self, tree_cache: Any, sink: Any) -> TreeView:
        """The adapter's view of `tree_cache`; `sink`: the EventSink its hooks mark nodes in."""
        return self._module(self.adapter).tree_view(tree_cache, sink)

    @property
    def pools(self) -> ModuleType:
        return self._module(self.pools_reader)

    @staticmethod
    def _module(name: str) -> ModuleType:
        return importlib.import_module(f"{__package__}.{name}")  # imports sglang: only once selected


UNIFIED_TREE_CORE = Generation(
    name="unified-tree-core",
    releases=("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
    hooks=HOOKS,
    required=tuple(
        h.target
        for h in HOOKS
        if h.kind == "scheduler"
        or h.body in ("cache.inserting", "cache.locked", "cache.checkpoint", "cache.releasing_row", "cache.released", "pools.allocated")
    ),
    adapter="adapter_0523",
    pools_reader="pools_0523",
)
MAMBA_RADIX_CACHE = Generation(
    name="mamba-radix-cache",
    releases=("0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.14", "0.5.15"),
    hooks=hooks_mrc.HOOKS,
    required=tuple(
        h.target
        for h in hooks_mrc.HOOKS
        if h.kind == "scheduler" or h.body in ("mrc.inserted", "mrc.locked", "cache.checkpoint", "pools.allocated")
    ),
    adapter="adapter_mrc",
    pools_reader="pools_0523",  # the same readers: a request's fields through req_kv.kv_of
)
UNIFIED_TREE_0516 = Generation(
    name="unified-tree-0516",
    releases=("0.5.16",),
    hooks=hooks_0516.HOOKS,
    required=hooks_0516.REQUIRED,
    adapter="adapter_0516",
    pools_reader="pools_0523",  # a request's fields through req_kv.kv_of, as on 0.5.17
    # 0.5.15 ships the same UnifiedRadixCache but builds a MambaRadixCache for hybrid models;
    # its MambaComponent, unlike 0.5.16's, has no int8 checkpoint pool, which the insert
    # bodies read (events_0516._donates): that keeps 0.5.15 on mamba-radix-cache.
    features=(f"{hooks_0516.MAMBA_COMPONENT}.int8_ckpt_pool",),
)
GENERATIONS: tuple[Generation, ...] = (UNIFIED_TREE_CORE, UNIFIED_TREE_0516, MAMBA_RADIX_CACHE)
"""Tried in this order: 0.5.16-0.5.20 still ship MambaRadixCache's methods, 0.5.15 the
UnifiedRadixCache of 0.5.16 (the `features` tell them apart)."""


@dataclass(frozen=True)
class Selection:
    """The generation this sglang runs, and its hooks as this release has them."""

    generation: Generation
    hooks: tuple[Hook, ...]
    """The hooks to register: present ones, and fallbacks standing in for missing ones."""
    skipped: tuple[Hook, ...]
    """Hooks of the table this release lacks (no fallback either)."""
    passed_over: tuple[str, ...] = ()
    """The generations tried before this one, each with what this release lacks of it."""

    def skipped_line(self) -> str:
        """What the skipped hooks cost, for the engine's log; "" if none."""
        if not self.skipped:
            return ""
        lost = "; ".join(dict.fromkeys(h.lost for h in self.skipped))
        return f"{len(self.skipped)} hooks not in this sglang ({', '.join(h.target for h in self.skipped)}): {lost}"


@dataclass(frozen=True)
class Unsupported:
    reason: str


class DetectionFailed(Exception):
    """A module of sglang exists but failed to import: absence cannot be told apart."""


def resolves(target: str) -> bool:
    """Whether `sglang.srt.<target>` exists in this sglang: the longest importable module
    prefix, then attributes. Raises DetectionFailed if a module that exists fails to import."""
    parts = ("sglang.srt." + target).split(".")
    for split in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:split])
        try:
            obj: Any = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this module (or a package above it) does not exist: try a shorter one
            raise DetectionFailed(f"importing {name} failed: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - sglang's import-time errors
            raise DetectionFailed(f"importing {name} failed: {type(exc).__name__}: {exc}") from exc
        for attr in parts[split:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def resolve(generation: Generation) -> Selection:
    """`generation`'s hooks as the installed sglang has them (its required ones or not)."""
    hooks, skipped = [], []
    for hook in generation.hooks:
        chosen = next((h for h in (hook, *hook.fallbacks) if resolves(h.target)), None)
        (hooks.append(chosen) if chosen is not None else skipped.append(hook))
    return Selection(generation, tuple(hooks), tuple(skipped))


def _resolves_or_falls_back(generation: Generation, target: str) -> bool:
    rows = [h for h in generation.hooks if h.target == target]
    return any(resolves(h.target) for row in rows for h in (row, *row.fallbacks))


def select() -> Selection | Unsupported:
    """The first generation whose required hooks all exist in the installed sglang."""
    tried = []
    for generation in GENERATIONS:
        missing = [t for t in generation.required if not _resolves_or_falls_back(generation, t)]
        missing += [name for name in generation.features if not resolves(name)]
        if missing:
            tried.append(f"{generation.name} (lacks {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")
            continue
        return dataclasses.replace(resolve(generation), passed_over=tuple(tried))
    return Unsupported(
        f"sglang {installed_release()} is not supported by mcinspect (it reads {_releases()}); no generation fits: "
        f"{'; '.join(tried)}. The hooks stay off and the engine runs untouched"
    )


def plugin_refusal() -> str:
    """Why nothing of mcinspect can attach to the installed sglang ("" when it can): before
    0.5.11 sglang has no plugin HookRegistry and never calls the plugin; only the import-time
    stand-in (registry.py, run by `mcinspect_pre_plugins.pth`) reaches it, so without that
    file in the environment the embedded engine refuses before it starts one."""
    try:
        if resolves("plugins.hook_registry.HookRegistry"):
            return ""
    except DetectionFailed:
        return ""  # it exists but fails to import: the plugin itself says why
    if _pre_plugins_pth_installed():
        return ""
    return (
        f"sglang {installed_release()} has no plugin hooks (`sglang.srt.plugins`, 0.5.11 on) and this environment "
        f"lacks mcinspect's import-time stand-in ({PRE_PLUGINS_PTH} in site-packages): reinstall mcinspect from its "
        "wheel (`pip install .`, not editable). The hooks stay off"
    )


PRE_PLUGINS_PTH = "mcinspect_pre_plugins.pth"


def _pre_plugins_pth_installed() -> bool:
    import site
    import sysconfig

    places = {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
    return any(os.path.isfile(os.path.join(place, PRE_PLUGINS_PTH)) for place in places)


def _releases() -> str:
    every = sorted((r for g in GENERATIONS for r in g.releases), key=lambda r: tuple(int(p) for p in r.split(".")))
    return ", ".join(every)


def strategy_field(server_args: Any) -> str:
    """sglang's name for the mamba cache strategy (on ServerArgs or an instance of it):
    `mamba_radix_cache_strategy` from 0.5.14, `mamba_scheduler_strategy` before (the same values)."""
    return "mamba_radix_cache_strategy" if hasattr(server_args, "mamba_radix_cache_strategy") else "mamba_scheduler_strategy"


def installed_release() -> str:
    try:
        import sglang

        return str(sglang.__version__)
    except Exception:  # noqa: BLE001 - only for the message
        return "(unknown version)"
