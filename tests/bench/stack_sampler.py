"""Where in the kernel a thread sleeps: samples its state and kernel stack every SAMPLE_S.

Run as `stack_sampler.py PID TID OUT` (the bench starts it beside the engine, as root: reading
another task's /proc stack needs it). Writes one line per sample in which the thread is not
running, `monotonic_s state frame<frame<frame` (the innermost frames first, scheduler frames
left out), until PID ends. A GIL or lock wait sleeps in `futex_*`, a page fault waiting for
a page or the mm's lock in `folio_wait_*` / `rwsem_*` / `lock_page*`.
"""

from __future__ import annotations

import os
import sys
import time

SAMPLE_S = 0.0005
GENERIC = ("schedule", "__schedule", "schedule_hrtimeout", "schedule_timeout", "io_schedule")


def frames(stack: str) -> str:
    names = [line.split("] ", 1)[-1].split("+", 1)[0] for line in stack.splitlines()]
    return "<".join(name for name in names if name not in GENERIC)[:160] or "?"


def main(pid: int, tid: int, out_path: str) -> None:
    task = f"/proc/{pid}/task/{tid}"
    with open(out_path, "w", buffering=1) as out:
        while os.path.exists(task):
            try:
                with open(f"{task}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                if state != "R":
                    with open(f"{task}/stack") as f:
                        out.write(f"{time.monotonic():.6f} {state} {frames(f.read())}\n")
            except (FileNotFoundError, ProcessLookupError):
                return
            time.sleep(SAMPLE_S)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
