"""Benchmark `kimi-k3 diff`: it runs on every push, so all stacks at both revisions must stay fast.

Budget: 2.5 s wall for one cold `kimi-k3 diff --base REF` process with an EMPTY render cache (imports, a git
worktree for the base, every stack rendered at both revisions in two parallel processes, checked and diffed) on
the 2-core CI machine; the same diff with the base already in the render cache (the usual case on a PR's second
push) is reported beside it. Exits 1 when over budget or when any stack fails to render.
Usage: .venv/bin/python bench/bench_diff.py [--runs N] [--base REF]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "render-cache"
BUDGET_SECONDS = 2.5


def cold_diff(base: str, empty_cache: bool) -> tuple[float, dict]:
    """Wall seconds and the JSON report of one `kimi-k3 diff` process."""
    if empty_cache:
        shutil.rmtree(CACHE, ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "kimi_k3", "diff", "--base", base, "--format", "json"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - start, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--base", default="HEAD", help="base revision (default HEAD: same cost as any base)")
    args = parser.parse_args()
    cold = [cold_diff(args.base, empty_cache=True) for _ in range(args.runs)]
    warm = [cold_diff(args.base, empty_cache=False) for _ in range(args.runs)]
    stacks = cold[-1][1]["stacks"]
    errors = [s["summary"] for s in stacks if s["status"] == "error"]
    times = [t for t, _ in cold]
    over = statistics.median(times) > BUDGET_SECONDS
    print(
        f"kimi-k3 diff, {len(stacks)} stacks x 2 revisions, empty render cache: median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s (budget {BUDGET_SECONDS} s) {'OVER' if over else 'ok'}"
    )
    print(f"  base already cached: median {statistics.median(t for t, _ in warm):.2f} s")
    for line in errors:
        print(f"render failed: {line}")
    return 1 if over or errors else 0


if __name__ == "__main__":
    sys.exit(main())
