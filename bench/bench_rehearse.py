"""Benchmark `kimi-k3 rehearse`: time to ready and the whole run (ready, smoke test, two AIPerf runs, report) per
stack, as a user runs it (`make rehearse`, default load: 32 requests per run, concurrency 4).

Budget on the 2-core CI machine: graph ready in < 60 s and the whole rehearsal in < 240 s per stack, smoke test
passed. Exits 1 when a stack is over budget or fails. Needs .venv-rehearse (`make bench` builds it).
Usage: .venv/bin/python bench/bench_rehearse.py [STACK ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_READY_SECONDS = 60.0
BUDGET_TOTAL_SECONDS = 240.0
sys.path.insert(0, str(ROOT))
from kimi_k3.config.stack_files import stack_names  # noqa: E402


def main() -> int:
    stacks = sys.argv[1:] or stack_names(ROOT)
    failed = False
    print(
        f"{'stack':<14} {'ready s':>8} {'total s':>8} {'TTFT p50 ms':>12} {'ITL p50 ms':>11} {'out tok/s':>10} "
        f"{'KV hit':>7}  budget {BUDGET_READY_SECONDS:.0f} s ready, {BUDGET_TOTAL_SECONDS:.0f} s total"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stacks:
            out = Path(tmp) / stack
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "kimi_k3", "rehearse", stack, "--out", str(out)],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            total = time.perf_counter() - start
            report = json.loads((out / "report.json").read_text()) if (out / "report.json").is_file() else {}
            ready = report.get("ready_seconds")
            load = report.get("load") or {}
            over = proc.returncode != 0 or ready is None or ready > BUDGET_READY_SECONDS or total > BUDGET_TOTAL_SECONDS
            failed |= over
            ttft, itl = (load.get("ttft_ms") or {}).get("p50"), (load.get("itl_ms") or {}).get("p50")
            print(
                f"{stack:<14} {ready if ready is not None else '-':>8} {total:>8.1f} {ttft or '-':>12} {itl or '-':>11} "
                f"{load.get('output_tokens_per_second') or '-':>10} {report.get('kv_hit_rate') or '-':>7}  "
                f"{'OVER/FAILED: ' + str(report.get('failure')) if over else 'ok'}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
