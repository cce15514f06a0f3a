"""Engine side of mcinspect: an sglang plugin that observes the mamba prefix cache.

Installed under the import name `mcinspect_engine_hooks`. Off unless MCINSPECT_PORT is set
(see `config.py`); `cpu_engine/` holds the embedded CPU engine (launcher, tiny model, patches).
"""
