#!/usr/bin/env bash
# Regenerate the recordings the TUI tests replay (tests/tui/recordings/): the embedded engine,
# seed 0, a 24-request workload: once clean and once with the double-owner fault (a donated
# slot stays in the request's ping-pong buffer: two owners, a violation from step 1 on); and
# two tensor-parallel ranks (demo --tp 2: rank 1's file beside rank 0's), clean and with the
# tp-desync fault (rank 1's allocator takes slots from the other end of its free list).
#   bash scripts/make-tui-recordings.sh [NAME...]     (default: all; names below)
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
  port=$(PYTHONPATH=tests/support .venv/bin/python -c "from engine_runs import free_ports_for_ranks; print(free_ports_for_ranks(2))")
  rm -f "$out/$name".*mcrec
  .venv/bin/mcinspect demo --headless --json --seed 0 --requests 24 --port "$port" --record "$out/$name.mcrec" "$@" > /dev/null
  for file in "$out/$name".*mcrec; do echo "wrote $file ($(stat -c %s "$file") bytes)"; done
}

declare -A options=(
  [clean]=""
  [fault]="--fault double-owner"
  [tp2]="--tp 2"
  [tp2-desync]="--tp 2 --fault tp-desync"
)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(clean fault tp2 tp2-desync)
for name in "${names[@]}"; do
  # shellcheck disable=SC2086  # the options are words
  record "$name" ${options[$name]}
done
