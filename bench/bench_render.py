"""Benchmark `kimi-k3 render`: it is interactive, so a render must stay near the CLI's import floor.

Budgets (cold processes, imports included, as a user runs them, on the 2-core CI machine):
- one stack (`kimi-k3 render STACK`): 1.2 s wall, peak RSS under 1 GiB;
- all stacks in ONE process (`kimi-k3 render A B C D`, how the tools and tests render several): 2.0 s wall.
Exits 1 when over budget. Usage: .venv/bin/python bench/bench_render.py [--runs N]
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
BUDGET_ONE_SECONDS = 1.2
BUDGET_ALL_SECONDS = 2.0
BUDGET_RSS_MIB = 1024
sys.path.insert(0, str(ROOT))
from kimi_k3.config.stack_files import stack_names  # noqa: E402


def cold_render(stacks: list[str], out: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user+sys) and peak RSS (MiB) of one `kimi-k3 render` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out_arg = out / stacks[0] if len(stacks) == 1 else out
    subprocess.run(
        [sys.executable, "-m", "kimi_k3", "render", *stacks, "--out", str(out_arg)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, max(before.ru_maxrss, after.ru_maxrss) / 1024


def report(label: str, runs: list[tuple[float, float, float]], budget: float) -> bool:
    times = [t for t, _, _ in runs]
    rss = max(r for _, _, r in runs)
    over = statistics.median(times) > budget or rss > BUDGET_RSS_MIB
    print(
        f"{label:<22} {statistics.median(times):>9.2f} {max(times):>7.2f} "
        f"{statistics.median(c for _, c, _ in runs):>7.2f} {rss:>9.0f}  budget {budget} s  {'OVER' if over else 'ok'}"
    )
    return over


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    stacks = stack_names(ROOT)
    failed = False
    print(
        f"{'render':<22} {'median s':>9} {'max s':>7} {'cpu s':>7} {'peak MiB':>9}  (RSS budget {BUDGET_RSS_MIB} MiB)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stacks:
            failed |= report(stack, [cold_render([stack], Path(tmp)) for _ in range(args.runs)], BUDGET_ONE_SECONDS)
        failed |= report(
            f"{len(stacks)} stacks, 1 process",
            [cold_render(stacks, Path(tmp)) for _ in range(args.runs)],
            BUDGET_ALL_SECONDS,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
