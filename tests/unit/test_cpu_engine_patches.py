"""The CPU-engine patches are active only where MCINSPECT_CPU_ENGINE=1, and then they work.

Each case runs a fresh interpreter, as sglang's scheduler processes are: the patches arrive
through the installed mcinspect_cpu_engine.pth, before anything imports sglang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys, torch
    print("sgl_kernel" in sys.modules, "torchvision" in sys.modules or any(
        type(f).__name__ == "_StubPackageFinder" for f in sys.meta_path))
    """
)


def _python(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "MCINSPECT_CPU_ENGINE"} | env
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_nothing_is_patched_without_the_flag() -> None:
    assert _python(PROBE) == "False False"
    code = "import torch; t = torch.ones(1); print(torch.Tensor.pin_memory.__qualname__)"
    assert "lambda" not in _python(code)


def test_flag_installs_ops_stubs_and_sglang_patches() -> None:
    code = textwrap.dedent(
        """
        import torch, sgl_kernel.mamba, torchvision.transforms as T
        from mcinspect_kernels.cpu_ops import SGL_KERNEL_MAMBA_OPS, SGL_KERNEL_TORCH_OPS
        assert sgl_kernel.mamba.chunk_gated_delta_rule_cpu is SGL_KERNEL_MAMBA_OPS["chunk_gated_delta_rule_cpu"]
        assert torch.ops.sgl_kernel.fused_gdn_gating_cpu is SGL_KERNEL_TORCH_OPS["fused_gdn_gating_cpu"]
        try:
            sgl_kernel.some_cuda_kernel()
        except NotImplementedError as exc:
            assert "kernels/cpu_ops" in str(exc)
        else:
            raise AssertionError("a missing op must raise when called")
        t = torch.ones(2)
        assert t.pin_memory() is t
        from sglang.srt.arg_groups import mamba_hook
        assert mamba_hook._platform_supports_mamba_cache_extra_buffer()
        from sglang.kernels.ops.attention.fla import fused_norm_gate
        assert fused_norm_gate._use_cpu is True
        from sglang.srt.layers.attention import hybrid_linear_attn_backend as backend
        from mcinspect_kernels.cpu_ops import TRITON_REPLACEMENTS
        name = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
        assert backend.track_mamba_states_all_layers is TRITON_REPLACEMENTS[name]["track_mamba_states_all_layers"]
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        assert TorchNativeAttnBackend.get_cpu_graph_seq_len_fill_value(None) == 1  # attention DP's padded rows
        import os
        print(os.environ["SGLANG_USE_CPU_ENGINE"])
        """
    )
    assert _python(code, MCINSPECT_CPU_ENGINE="1") == "1"


def test_the_engine_plugin_loads_no_embedded_engine_code() -> None:
    """What a GPU server imports (the plugin, the inspector it builds) needs no cpu_engine module."""
    code = (
        "import sys, mcinspect_engine_hooks.plugin, mcinspect_engine_hooks.inspector\n"
        "print(sorted(m for m in sys.modules if m.startswith('mcinspect_engine_hooks.cpu_engine')))"
    )
    assert _python(code) == "[]"
