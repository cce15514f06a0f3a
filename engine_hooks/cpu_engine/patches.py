"""Every change the embedded CPU engine makes to sglang (0.5.23; 0.5.21 and 0.5.22 where they
differ), each with its reason.

This is the one place where mcinspect alters sglang. It runs only in processes of the
embedded CPU engine: the launcher calls `install()` in its own process and sets
MCINSPECT_CPU_ENGINE=1 for the scheduler processes sglang spawns, where
`mcinspect_cpu_engine.pth` calls `install()` at interpreter start, before sglang is imported.
In a GPU engine where mcinspect is merely installed, the variable is unset and nothing here
runs. The patches make sglang *run* on a plain CPU; none of them touches the cache logic
that mcinspect inspects.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import signal
import sys
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .patches_mrc import DEFINITIONS, NOT_YET, REPLACEMENTS, WRAPPERS

ENV_FLAG = "MCINSPECT_CPU_ENGINE"
"""Set to "1" in the embedded CPU engine's processes; nothing is patched otherwise."""
LAUNCHER_PID_ENV = "MCINSPECT_ENGINE_LAUNCHER_PID"
"""The pid of the process that started the embedded engine (set by the launcher)."""

# Environment sglang itself reads. Reason: `is_cpu()` is False unless this is set, and the
# CUDA code paths then import vllm and CUDA kernels.
SGLANG_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}


def _post_import_definitions() -> dict[str, dict[str, Any]]:
    """Module -> {attribute or Class.attribute: value} for names the module binds only on accelerators."""
    from mcinspect_kernels.cpu_ops import ACCELERATOR_ONLY_NAMES

    # Reason: mamba.py (Mamba2, NemotronH) imports its causal conv kernels only under
    # is_cuda() / is_npu() / is_xpu(), yet calls them on every device.
    definitions: dict[str, dict[str, Any]] = {module: dict(attrs) for module, attrs in ACCELERATOR_ONLY_NAMES.items()}
    # Reason: under attention data parallelism (--attn-dp-size) each forward pads its batch for
    # the MLP sync and asks the attention backend what seq len a padded row gets; on a CPU only
    # the Intel AMX backend answers (1), not the torch native backend a CPU without AMX runs.
    definitions["sglang.srt.layers.attention.torch_native_backend"] = {
        "TorchNativeAttnBackend.get_cpu_graph_seq_len_fill_value": _IfAbsent(_padded_rows_seq_len)
    }
    # Reason: in each patches_mrc entry (sglang 0.5.12-0.5.15: MambaRadixCache releases).
    for module, attrs in DEFINITIONS.items():
        definitions.setdefault(module, {}).update({name: _IfAbsent(value) for name, value in attrs.items()})
    return definitions


def _post_import_patches() -> dict[str, dict[str, Any]]:
    """Module -> {attribute: replacement}, applied right after the module executes."""
    from mcinspect_kernels.cpu_ops import TRITON_REPLACEMENTS

    patches: dict[str, dict[str, Any]] = {
        # Reason: extra_buffer is refused on CPU by a platform check, yet the CPU engine runs
        # its state tracking fine with the torch ops below; mcinspect needs that strategy.
        # sglang 0.5.21 asserts the platform inline in validate_mamba_extra_buffer instead (the
        # function 0.5.22 factored out is absent): its validator runs with a platform that says yes.
        "sglang.srt.arg_groups.mamba_hook": {
            "_platform_supports_mamba_cache_extra_buffer": _IfPresent(_true),
            "validate_mamba_extra_buffer": _Wrap(_validated_as_on_cuda, unless="_platform_supports_mamba_cache_extra_buffer"),
        },
        # Reason: gated RMSNorm takes the sgl_kernel CPU op only on AMX hosts, else a Triton
        # kernel that needs a GPU; our torch op stands in for the CPU op on every host.
        "sglang.kernels.ops.attention.fla.fused_norm_gate": {"_use_cpu": True},
        "sglang.kernels.ops.attention.fla.layernorm_gated": {"_use_cpu": True},
        # Reason: sglang <= 0.5.22 builds the decode track plan with torch.tensor(...,
        # pin_memory=True), which CPU-only torch refuses; this module's `torch` drops the hint.
        "sglang.srt.managers.schedule_batch": {"torch": _torch_without_pinning()},
    }
    # Reason: sglang 0.5.21's paged KV allocator launches its Triton page-allocation kernels on
    # every device (0.5.22 imports `current_platform` there to take torch fallbacks on a CPU).
    from mcinspect_kernels.cpu_ops.paged_alloc import alloc_decode_kernel_cpu, alloc_extend_kernel_cpu

    patches["sglang.srt.mem_cache.allocator.paged"] = {
        "alloc_extend_kernel": _Wrap(lambda module, kernel: alloc_extend_kernel_cpu, unless="current_platform"),
        "alloc_decode_kernel": _Wrap(lambda module, kernel: alloc_decode_kernel_cpu, unless="current_platform"),
    }
    # Reason: mamba state-tracking copies, the MoE shared-expert gate and Mamba2's SSD scan
    # and decode update are Triton-only on a non-AMX CPU; torch versions with the same
    # signatures replace them.
    for module, attrs in TRITON_REPLACEMENTS.items():
        patches.setdefault(module, {}).update(attrs)
    # Reason: in each patches_mrc entry (sglang 0.5.12-0.5.15: MambaRadixCache releases).
    for module, wrappers in WRAPPERS.items():
        patches.setdefault(module, {}).update({name: _WrapIfPresent(wrap) for name, wrap in wrappers.items()})
    for module, attrs in REPLACEMENTS.items():
        patches.setdefault(module, {}).update({name: _IfPresent(value) for name, value in attrs.items()})
    for module, names in NOT_YET.items():
        patches[module].update({name: _IfPresent(patches[module][name]) for name in names})
    return patches


def _padded_rows_seq_len(self: Any) -> int:
    return 1  # what sglang's Intel AMX backend gives padded rows


def _true() -> bool:
    return True


def _validated_as_on_cuda(module: types.ModuleType, validate: Callable[..., Any]) -> Callable[..., Any]:
    """`validate` with the module's `get_platform` answering `is_cuda` True during the call (its
    one platform read is the assertion; every other check of the validator runs as written)."""
    get_platform = module.get_platform

    class SnapshotCapable:
        is_cuda = True

        def __getattr__(self, name: str) -> Any:
            return getattr(get_platform(), name)

    def validate_on_cpu(*args: Any, **kwargs: Any) -> Any:
        module.get_platform = SnapshotCapable  # type: ignore[attr-defined]
        try:
            return validate(*args, **kwargs)
        finally:
            module.get_platform = get_platform  # type: ignore[attr-defined]

    return validate_on_cpu


def _torch_without_pinning() -> types.ModuleType:
    """torch, except that `tensor(..., pin_memory=True)` makes an ordinary CPU tensor (pinning
    has no meaning without an accelerator: the values are the same)."""
    import torch

    class TorchWithoutPinning(types.ModuleType):
        def __getattr__(self, name: str) -> Any:  # attributes torch binds lazily
            return getattr(torch, name)

    proxy = TorchWithoutPinning("torch")
    proxy.__dict__.update(torch.__dict__)
    make = torch.tensor

    def tensor(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return make(*args, **kwargs)

    proxy.tensor = tensor  # type: ignore[attr-defined]
    return proxy


def _leave_stop_signals_to_the_launcher() -> None:
    """Reason: not sglang's code but its processes. The launcher's process handles Ctrl-C and
    SIGTERM and shuts the engine down; the processes sglang spawns ignore them, so a terminal's
    Ctrl-C or a kill of the process group (`timeout`) does not make each die first and print a
    traceback. They still die with the launcher (sglang kills them, and gives them a
    parent-death signal)."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher and launcher != str(os.getpid()):
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


def install() -> None:
    """Apply every patch in this process (idempotent)."""
    if getattr(install, "done", False):
        return
    install.done = True  # type: ignore[attr-defined]
    os.environ.update(SGLANG_ENV)
    # Reason: PyPI's torchvision links libtorch_cuda and cannot load beside CPU torch, yet
    # sglang imports torchvision.transforms on the mem_cache import path.
    sys.meta_path.insert(0, _StubPackageFinder("torchvision"))
    # Reason: PyPI's sglang-kernel has CUDA builds only; sglang's CPU path imports its CPU
    # ops from `sgl_kernel.mamba` and `torch.ops.sgl_kernel`.
    _install_sgl_kernel_cpu_ops()
    patcher = _PostImportPatcher(_post_import_patches(), _post_import_definitions())
    for module_name in patcher.modules() & sys.modules.keys():  # imported before install()
        patcher.apply(sys.modules[module_name])
    sys.meta_path.insert(0, patcher)
    _disable_pin_memory_without_accelerator()
    _leave_stop_signals_to_the_launcher()
    # Reason: on CPU sglang warns at import that CUDA-only quantization and Triton paths are
    # unavailable; expected here, and repeated by every engine process.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"sglang\.")
    # Not a fix but a deliberate bug: `mcinspect demo --fault NAME` (MCINSPECT_FAULT) reproduces
    # an upstream bug class in the scheduler so the checks can be seen to catch it.
    from .faults import install_fault_from_env

    install_fault_from_env()
    # Not a patch either: the embedded engine's second T2 oracle (transformers' implementation of
    # the tiny model), offered to the inspector through its extension interface.
    from .oracle import register_transformers_oracle

    register_transformers_oracle()


def _disable_pin_memory_without_accelerator() -> None:
    # Reason: on CPU-only torch Tensor.pin_memory() raises "Cannot access accelerator
    # device", and schedule_batch calls it unconditionally under extra_buffer. Pinning has
    # no meaning without an accelerator, so returning the tensor itself is exact.
    import torch

    if not torch.cuda.is_available():
        torch.Tensor.pin_memory = lambda self, *args, **kwargs: self  # type: ignore[method-assign]


def _install_sgl_kernel_cpu_ops() -> None:
    import torch

    from mcinspect_kernels.cpu_ops import SGL_KERNEL_MAMBA_OPS, SGL_KERNEL_TORCH_OPS

    package = _MissingOpModule("sgl_kernel", {})
    package.__path__ = []  # a package, so `sgl_kernel.mamba` resolves as its submodule
    package.__version__ = "0.0.0+mcinspect-cpu"
    mamba = _MissingOpModule("sgl_kernel.mamba", SGL_KERNEL_MAMBA_OPS)
    package.mamba = mamba
    sys.modules["sgl_kernel"] = package
    sys.modules["sgl_kernel.mamba"] = mamba
    # Reason: 0.5.12's scheduler imports the host-cache copies (HiCache) by name at import time.
    kvcacheio = _MissingOpModule("sgl_kernel.kvcacheio", {})
    package.kvcacheio = kvcacheio
    sys.modules["sgl_kernel.kvcacheio"] = kvcacheio
    torch.ops.__dict__["sgl_kernel"] = _TorchOpsNamespace(SGL_KERNEL_TORCH_OPS)


class _MissingOpModule(types.ModuleType):
    """A module whose known ops are ours; any other attribute is a function that raises.

    sglang imports many sgl_kernel names at module import time on paths the tiny CPU model
    never calls; importing must succeed, calling must fail loudly.
    """

    def __init__(self, name: str, ops: dict[str, Callable[..., Any]]) -> None:
        super().__init__(name)
        self.__dict__.update(ops)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing_op(f"{self.__name__}.{name}")


class _TorchOpsNamespace:
    """Stands in for `torch.ops.sgl_kernel`: our torch ops, AttributeError for the rest."""

    def __init__(self, ops: dict[str, Callable[..., Any]]) -> None:
        self._ops = ops

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return self._ops[name]
        except KeyError:
            raise AttributeError(f"torch.ops.sgl_kernel.{name}: not provided by the mcinspect CPU engine") from None


def _missing_op(qualname: str) -> Callable[..., Any]:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{qualname} was called, but the mcinspect CPU engine has no CPU version of it; "
            "add one to kernels/cpu_ops/ if this model needs it"
        )

    missing.__name__ = qualname.rsplit(".", 1)[-1]
    return missing


class _StubPackageFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves `<name>` and its submodules to permissive stubs (see install())."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname == self.name or fullname.startswith(self.name + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _PermissiveModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+mcinspect-stub"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Permissive:
    """Any attribute, call or base-class use succeeds; used only at import time by sglang."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> _Permissive:
        return _Permissive()

    def __getattr__(self, name: str) -> _Permissive:
        return _Permissive()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _PermissiveModule(types.ModuleType):
    def __getattr__(self, name: str) -> _Permissive:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Permissive()


class _IfPresent:
    """A replacement applied only where the release has the attribute."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _Wrap:
    """A replacement `wrap(module, original)`, applied only where the module lacks `unless`."""

    def __init__(self, wrap: Callable[[types.ModuleType, Any], Any], unless: str) -> None:
        self.wrap = wrap
        self.unless = unless


class _WrapIfPresent:
    """`Class.method` replaced by `wrap(method)` where the release has it."""

    def __init__(self, wrap: Callable[[Any], Any]) -> None:
        self.wrap = wrap


class _IfAbsent:
    """A definition made only where the release lacks the attribute (a later one may have it)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _set_attributes(module: types.ModuleType, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        if isinstance(value, _WrapIfPresent):
            owner_name, _, attribute = name.rpartition(".")
            owner = getattr(module, owner_name, None)
            if owner is not None and attribute in vars(owner):
                setattr(owner, attribute, value.wrap(getattr(owner, attribute)))
            continue
        if isinstance(value, _IfPresent):
            if hasattr(module, name):
                setattr(module, name, value.value)
            continue
        if isinstance(value, _Wrap):
            if not hasattr(module, value.unless):
                setattr(module, name, value.wrap(module, getattr(module, name)))
            continue
        if not hasattr(module, name):  # sglang moved it: fail loudly rather than run unpatched
            raise AttributeError(f"mcinspect CPU engine: {module.__name__}.{name} is gone; the patch needs updating")
        setattr(module, name, value)


def _define_attributes(module: types.ModuleType, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        owner_name, _, attribute = name.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        if isinstance(value, _IfAbsent):
            if not hasattr(owner, attribute):
                setattr(owner, attribute, value.value)
            continue
        if hasattr(owner, attribute):  # sglang now binds it on CPU: ours would shadow theirs
            raise AttributeError(f"mcinspect CPU engine: {module.__name__}.{name} now exists on CPU; the patch needs updating")
        setattr(owner, attribute, value)


class _PostImportPatcher(importlib.abc.MetaPathFinder):
    """Sets attributes on a module right after it executes, before anyone imports from it:
    `replacements` must exist there, `definitions` must not."""

    def __init__(self, replacements: dict[str, dict[str, Any]], definitions: dict[str, dict[str, Any]]) -> None:
        self.replacements = replacements
        self.definitions = definitions
        self._done: set[str] = set()

    def modules(self) -> set[str]:
        return (self.replacements.keys() | self.definitions.keys()) - self._done

    def apply(self, module: types.ModuleType) -> None:
        self._done.add(module.__name__)
        _set_attributes(module, self.replacements.get(module.__name__, {}))
        _define_attributes(module, self.definitions.get(module.__name__, {}))

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if fullname not in self.modules():
            return None
        sys.meta_path.remove(self)  # let the normal finders locate the real module
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        run_module = spec.loader.exec_module

        def exec_then_patch(module: types.ModuleType) -> None:
            run_module(module)
            self.apply(module)

        spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec
