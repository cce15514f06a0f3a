"""mcinspect: inspector and debugger for the mamba (SSM) prefix cache of a live SGLang engine."""

__version__ = "0.1.0"
