"""Benchmark `kimi-k3 render`: it is interactive, so each stack must render well under its budget.

Budget: 5 s per stack, cold (a fresh `kimi-k3 render STACK` process, imports included, as a user runs it),
on the 2-core CI machine; peak RSS of that process under 1 GiB. Exits 1 when a stack is over budget.
Usage: .venv/bin/python bench/bench_render.py [--runs N]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_SECONDS = 5.0
BUDGET_RSS_MIB = 1024
sys.path.insert(0, str(ROOT))
from kimi_k3.stacks import stack_names  # noqa: E402


def cold_render(stack: str, out: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one `kimi-k3 render` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kimi_k3", "render", stack, "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    rss = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return elapsed, rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    failed = False
    print(f"{'stack':<14} {'median s':>9} {'max s':>7} {'peak MiB':>9}  budget {BUDGET_SECONDS} s, {BUDGET_RSS_MIB} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stack_names(ROOT):
            runs = [cold_render(stack, Path(tmp) / stack) for _ in range(args.runs)]
            times = [t for t, _ in runs]
            rss = max(r for _, r in runs)
            over = max(times) > BUDGET_SECONDS or rss > BUDGET_RSS_MIB
            failed |= over
            print(f"{stack:<14} {statistics.median(times):>9.2f} {max(times):>7.2f} {rss:>9.0f}  {'OVER' if over else 'ok'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
