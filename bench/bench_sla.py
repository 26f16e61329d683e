"""Benchmark `kimi-k3 plan --sla`: a ranked, deployable answer in under 30 s on the 2-core machine.

Budget: 30 s wall per cold `kimi-k3 plan --sla ...` process (imports included), for a few SLAs and traffic
shapes (agentic long context, chat-like short context, with and without a request rate). Exits 1 when over.
Usage: .venv/bin/python bench/bench_sla.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 30.0
CASES = [
    ["--sla", "ttft_ms=20000,tpot_ms=100", "--isl", "32768", "--osl", "1024"],
    ["--sla", "ttft_ms=5000,tpot_ms=50", "--isl", "8192", "--osl", "1024", "--request-rate", "2"],
    ["--sla", "ttft_ms=120000,tpot_ms=200", "--isl", "262144", "--osl", "1024", "--request-rate", "0.5"],
    # off the table's grid, with prefix-cache hits and the prefill queue sizing copies (issue 20 / 25)
    [
        "--sla",
        "ttft_ms=3000,tpot_ms=50",
        "--isl",
        "131072",
        "--osl",
        "1000",
        "--cache-hit-rate",
        "0.92",
        "--request-rate",
        "1",
    ],
]


def cold_sla(argv: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kimi_k3", "plan", *argv], cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    failed = False
    print(f"{'case':<70} {'median s':>9} {'max s':>7}  budget {BUDGET_SECONDS} s")
    for argv in CASES:
        runs = [cold_sla(argv) for _ in range(args.runs)]
        times = [t for t, _ in runs]
        over = max(times) > BUDGET_SECONDS or any(code not in (0, 1) for _, code in runs)
        failed |= over
        print(f"{' '.join(argv):<70} {statistics.median(times):>9.2f} {max(times):>7.2f}  {'OVER' if over else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
