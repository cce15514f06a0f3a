#!/usr/bin/env bash
# Create .venv with the pinned CPU stack (torch 2.13.0 CPU, sglang 0.5.23 without its CUDA
# dependencies) and install mcinspect into it. Idempotent: the heavy part runs once per
# change of the pins; mcinspect itself is reinstalled every time (pure Python, seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3.11}
venv=${MCINSPECT_VENV:-.venv}
stamp="$venv/.deps-$(cat requirements/*.txt scripts/setup-venv.sh | sha256sum | cut -c1-16)"

# pip reports sglang's declared (CUDA) requirements as conflicts: expected with --no-deps.
pip_install() {
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v -e "^sglang 0.5.23 requires" -e "dependency resolver does not currently" -e "^WARNING: Location .file://" || true; }
  return "${PIPESTATUS[0]}"
}

# A dangling link or a venv whose python is gone (moved checkout) cannot be reused.
if [ -L "$venv" ] && [ ! -e "$venv" ] || { [ -e "$venv" ] && [ ! -x "$venv/bin/python" ]; }; then
  echo "removing $venv: not a usable venv (dangling link or no bin/python); recreating it"
  rm -rf "$venv"
fi

if [ ! -f "$stamp" ]; then
  echo "setting up $venv (first time: about 2 minutes, 2.5 GB)..."
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  pip_install torch==2.13.0                # the CPU build; a bare 'torch' would pull CUDA
  pip_install --no-deps sglang==0.5.23     # its declared deps pull the CUDA stack
  pip_install -r requirements/cpu-engine.txt -c requirements/constraints.txt
  rm -f "$venv"/.deps-*
  touch "$stamp"
fi
pip_install --no-deps --force-reinstall --no-build-isolation .
rm -rf build ./*.egg-info
