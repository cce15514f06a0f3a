"""Adds the .pth files to the wheel (pyproject.toml holds everything else).

A .pth runs at interpreter start in every process of the environment, which is the only
hook that reaches the scheduler processes sglang spawns before they import sglang.
mcinspect_cpu_engine.pth does nothing unless MCINSPECT_CPU_ENGINE=1 (set by the embedded CPU
engine launcher only); mcinspect_pre_plugins.pth nothing unless MCINSPECT_PORT is set and the
installed sglang has no `sglang.srt.plugins` (0.5.10: engine_hooks/registry.py).
"""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PTHS = (os.path.join("engine_hooks", "cpu_engine", "mcinspect_cpu_engine.pth"), os.path.join("engine_hooks", "mcinspect_pre_plugins.pth"))


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        for pth in PTHS:
            shutil.copy(pth, os.path.join(self.build_lib, os.path.basename(pth)))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(os.path.join(self.build_lib, os.path.basename(p)) for p in PTHS)]


setup(cmdclass={"build_py": BuildPyWithPth})
