"""Benchmark the test suite: `make test` is what every contributor and CI run, so it must stay short.

Budget: 45 s wall for `make test` (venv already built) on the 2-core CI machine.
Exits 1 when over budget or when the suite fails. Usage: .venv/bin/python bench/bench_tests.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 45.0


def main() -> int:
    start = time.perf_counter()
    proc = subprocess.run(["make", "test"], cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    over = elapsed > BUDGET_SECONDS
    print(f"make test: {elapsed:.1f} s (budget {BUDGET_SECONDS} s) {'OVER' if over else 'ok'}: {summary}")
    return 1 if over or proc.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
