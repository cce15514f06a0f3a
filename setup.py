"""Adds mcinspect_cpu_engine.pth to the wheel (pyproject.toml holds everything else).

The .pth runs at interpreter start in every process of the environment, which is the only
hook that reaches the scheduler processes sglang spawns before they import sglang. It does
nothing unless MCINSPECT_CPU_ENGINE=1 (set by the embedded CPU engine launcher only).
"""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "mcinspect_cpu_engine.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        shutil.copy(os.path.join("engine_hooks", "cpu_engine", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
