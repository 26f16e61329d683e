"""Benchmark `kimi-k3 diff`: it runs on every push, so all stacks at both revisions must stay fast.

Budget: 30 s wall for one cold `kimi-k3 diff --base REF` process (imports, a git worktree for the base, both
sides rendered, checked and diffed; every stack) on the 2-core CI machine. Exits 1 when over budget or when
any stack fails to render (a timing of a failed render means nothing).
Usage: .venv/bin/python bench/bench_diff.py [--runs N] [--base REF]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 30.0


def cold_diff(base: str) -> tuple[float, dict]:
    """Wall seconds and the JSON report of one `kimi-k3 diff` process."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kimi_k3", "diff", "--base", base, "--format", "json"],
                          cwd=ROOT, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--base", default="HEAD", help="base revision (default HEAD: same cost as any base)")
    args = parser.parse_args()
    runs = [cold_diff(args.base) for _ in range(args.runs)]
    times = [t for t, _ in runs]
    stacks = runs[-1][1]["stacks"]
    errors = [s["summary"] for s in stacks if s["status"] == "error"]
    over = max(times) > BUDGET_SECONDS
    print(f"kimi-k3 diff, {len(stacks)} stacks x 2 revisions: median {statistics.median(times):.2f} s, "
          f"max {max(times):.2f} s (budget {BUDGET_SECONDS} s) {'OVER' if over else 'ok'}")
    for line in errors:
        print(f"render failed: {line}")
    return 1 if over or errors else 0


if __name__ == "__main__":
    sys.exit(main())
