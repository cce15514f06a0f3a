#!/usr/bin/env bash
# Regenerate screenshots/: record the embedded engine with a fault of the fault library, then
# render the tree and the TUI's main screens from that recording; and record two TP ranks with
# the tp-desync fault for the ranks tab (tui-ranks.svg).
#   bash scripts/make-screenshots.sh [FAULT]      (default: double-owner)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
fault=${1:-double-owner}
dir=$(mktemp -d)
.venv/bin/mcinspect demo --headless --json --requests 40 --fault "$fault" --record "$dir/demo.mcrec" > /dev/null
.venv/bin/mcinspect render "$dir/demo.mcrec" -o screenshots/tree-fault.svg --max-nodes 80
.venv/bin/python scripts/tui_screenshots.py "$dir/demo.mcrec" screenshots
.venv/bin/mcinspect demo --headless --json --tp 2 --requests 24 --fault tp-desync --record "$dir/tp2.mcrec" > /dev/null
.venv/bin/python scripts/tui_screenshots.py --ranks "$dir/tp2.mcrec" screenshots
