#!/usr/bin/env bash
# Create .venv-sglang-X.Y.Z: sglang X.Y.Z (the wheel, --no-deps) and mcinspect over the CPU stack
# of .venv (torch 2.13.0 CPU, transformers, ... set up by setup-venv.sh first), which it reads
# through a .pth line after its own site-packages, so its own sglang is the one imported.
# Usage: scripts/setup-release-venv.sh 0.5.22   (prints the venv's path last)
set -euo pipefail
cd "$(dirname "$0")/.."
release=${1:?usage: $0 SGLANG_RELEASE (e.g. 0.5.22)}
supported="0.5.10 0.5.11 0.5.12 0.5.13 0.5.14 0.5.15 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23"  # mcinspect_engine_hooks.generations: the releases the hooks read
case " $supported " in
  *" $release "*) ;;
  *) echo "warning: mcinspect reads sglang $supported; on $release the engine runs with the hooks off and says why" >&2 ;;
esac
bash scripts/setup-venv.sh >&2
# .venv's site-packages, and those its own .pth lines add (a light .venv over another's stack)
base=$(.venv/bin/python -c 'import sys, sysconfig; own = sysconfig.get_paths()["purelib"]; print("\n".join([own] + [p for p in sys.path if p.endswith("site-packages") and p != own]))')
venv=.venv-sglang-$release
pip_install() {
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v -e "requires" -e "dependency resolver does not currently" -e "^WARNING: Location .file://" || true; }
  return "${PIPESTATUS[0]}"
}
if [ ! -f "$venv/.sglang-$release" ]; then
  echo "setting up $venv (sglang $release over .venv's CPU stack)..." >&2
  rm -rf "$venv"
  python3.11 -m venv "$venv"
  "$venv/bin/python" -m pip uninstall --quiet --yes setuptools  # .venv's newer one builds mcinspect
  pip_install --no-deps "sglang==$release"
  # Its own transformers where .venv's is too new for it (0.5.10-0.5.19 register configs 5.19 has built in, e.g. qwen3_asr).
  case $release in
    0.5.1[0-9]) pip_install --no-deps transformers==5.12.1 tokenizers==0.22.2 huggingface-hub==1.33.0 ;;
  esac
  touch "$venv/.sglang-$release"
fi
# Rewritten each time: the venv made under a .venv link (or another checkout) must read this one's.
own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$base" > "$own/mcinspect-cpu-stack.pth"
pip_install --no-deps --force-reinstall --no-build-isolation .
rm -rf build ./*.egg-info
"$venv/bin/python" -c "import importlib.metadata as m; assert m.version('sglang') == '$release', m.version('sglang')"
echo "$venv"
