"""mcinspect kernels: slot fingerprint/state-distance kernels (later) and torch CPU ops."""
