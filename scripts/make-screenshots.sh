#!/usr/bin/env bash
# Regenerate screenshots/: record the embedded engine with a fault of the fault library, then
# render the tree and the TUI's main screens from that recording.
#   bash scripts/make-screenshots.sh [FAULT]      (default: double-owner)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
fault=${1:-double-owner}
recording=$(mktemp -d)/demo.mcrec
.venv/bin/mcinspect demo --headless --json --requests 40 --fault "$fault" --record "$recording" > /dev/null
.venv/bin/mcinspect render "$recording" -o screenshots/tree-fault.svg --max-nodes 80
.venv/bin/python scripts/tui_screenshots.py "$recording" screenshots
