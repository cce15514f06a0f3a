#!/usr/bin/env bash
# Regenerate the recordings the TUI tests replay (tests/tui/recordings/): the embedded engine,
# seed 0, a 24-request workload, once clean and once with the double-owner fault (a donated
# slot stays in the request's ping-pong buffer: two owners, a violation from step 1 on).
#   bash scripts/make-tui-recordings.sh
# then refresh the snapshot baselines and look at them:
#   .venv/bin/pytest tests/tui --snapshot-update
# Rids are random uuids, and pids, ports and times differ per run: a new recording changes the
# baselines. The tests only ever read the committed files.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
out=tests/tui/recordings
mkdir -p "$out"

record() {  # NAME [demo options...]
  local name=$1 port
  shift
  port=$(PYTHONPATH=tests/support .venv/bin/python -c "from engine_runs import free_port_pair; print(free_port_pair())")
  .venv/bin/mcinspect demo --headless --json --seed 0 --requests 24 --port "$port" --record "$out/$name.mcrec" "$@" > /dev/null
  echo "wrote $out/$name.mcrec ($(stat -c %s "$out/$name.mcrec") bytes)"
}

record clean
record fault --fault double-owner
