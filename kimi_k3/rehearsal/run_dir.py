"""The rehearsal's output directory: one run at a time (its lock), and a previous run's results removed first."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from kimi_k3.errors import UserError

LOCK_FD_ENV = "KIMI_K3_REHEARSE_LOCK_FD"  # the run's lock, held across the exec into the network namespace


PLOTS = (
    "latency.png",
    "workers.png",
    "agentic_ttft.png",
    "trace_hit_rate.png",
    "trace_role_load.png",
    "trace_ratio.png",
)


# A previous run's results: removed before this run starts, so a failed or interrupted run never shows them.
TRACE_COPY = "trace.jsonl"  # the replayed selection of --trace, in the run directory


PREVIOUS = ("report.json", "report.md", "processes.json", "perf_profile.npz", TRACE_COPY, *PLOTS)


PREVIOUS_DIRS = ("aiperf", "logs", "discovery")


def lock_out(out: Path) -> int:
    """An exclusive lock on OUT/.lock for this run (released when the process ends, however it ends); a second
    rehearsal into the same directory is refused, naming the holder."""
    import fcntl

    inherited = os.environ.get(LOCK_FD_ENV)
    if inherited:  # taken by this same process before it entered the network namespace
        return int(inherited)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # what os.access cannot tell (root on /proc, a read-only mount)
        raise UserError(f"--out {out}: cannot be written ({exc.strerror or exc})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 500).decode(errors="replace").strip() or "pid unknown"
        os.close(fd)
        raise UserError(
            f"--out {out}: another rehearsal is running there ({holder}); wait for it to end, stop it, "
            "or give another --out"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    return fd


def clear_previous(out: Path) -> None:
    for name in PREVIOUS:
        (out / name).unlink(missing_ok=True)
    for name in PREVIOUS_DIRS:
        shutil.rmtree(out / name, ignore_errors=True)
