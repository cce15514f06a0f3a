"""mcinspect's kernels (installed as `mcinspect_kernels`; PyPI's `kernels` is an sglang dependency).

- `fingerprint`: bit-exact 64-bit fingerprints of mamba slots, with NaN/Inf and zero detection
  (Triton on CUDA, numpy on CPU tensors, an identical torch path elsewhere).
- `state_distance`: max-abs and relative-L2 distances between slots, or a slot and a reference.
- `cpu_ops`: torch CPU versions of the linear-attention ops sglang needs on a plain CPU.
"""
