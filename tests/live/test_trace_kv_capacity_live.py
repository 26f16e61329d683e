"""The achieved KV hit rate rises with KV capacity (issue 21), with real processes: the same trace replayed through
`kimi-k3 rehearse gb300 --trace` twice (aggregated: each worker prefills what it caches, so the frontend's hit rate
is its own cache's; on gb300-disagg one run measured the opposite order, noise of 16 repeats across two decode
workers), the mockers sized by the planner from a small KV pool
(`--kv-budget-gib 0.5`: 24 blocks of 1536 tokens a worker, still enough for the smoke test's probe) and from the stack's own (1,411 blocks). The trace cycles
through more shared prefixes than the small cache holds, so under LRU eviction the small cache finds few of them and
the large one nearly all; neither exceeds the best any cache could reach. Marked `rehearse`; bounded (60 requests,
15 s of replay each, 420 s per run)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from test_rehearse_live import assert_nothing_left, rehearsal_venv  # noqa: F401 (the venv check, autouse)
from test_trace_rehearse_live import ROUNDING

pytestmark = pytest.mark.rehearse
PREFIXES, ROUNDS = 20, 3  # 20 prefixes of 3 blocks (60 blocks) > two 24-block caches


def cycling_trace() -> list[dict]:
    """Request i opens with prefix i % 20 (9 hash ids = 4,608 tokens = 3 TP8 blocks), then one 512-token block of its
    own; 500 ms apart, the prefixes in a fixed cycle (LRU's worst case)."""
    out = []
    for i in range(PREFIXES * ROUNDS):
        ids = [100 * (1 + i % PREFIXES) + j for j in range(9)] + [10_000 + i]
        out.append({"timestamp": 500 * i, "input_length": 10 * 512 - 9, "output_length": 8, "hash_ids": ids})
    return out


def _replay(tmp_path, name: str, extra: list[str]) -> dict:
    path = tmp_path / "cycle.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in cycling_trace()))
    out = tmp_path / name
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kimi_k3",
            "rehearse",
            "gb300",
            "--out",
            str(out),
            "--trace",
            str(path),
            "--trace-speedup",
            "2",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert_nothing_left(out)
    return json.loads((out / "report.json").read_text())


def test_hit_rate_rises_with_kv_capacity(tmp_path):
    small = _replay(tmp_path, "small", ["--kv-budget-gib", "0.5"])
    large = _replay(tmp_path, "large", [])
    assert small["roles"]["decode"]["num_gpu_blocks"] == 24
    assert large["roles"]["decode"]["num_gpu_blocks"] == 1411
    best = large["trace"]["best_hit_rate"]
    assert best == small["trace"]["best_hit_rate"]
    # by hand: the first 20 requests miss; each later one could find its 3 prefix blocks (4,608 of 5,111 tokens)
    assert best == pytest.approx(40 * 4608 / (60 * 5111), abs=1e-4)
    lo, hi = small["trace"]["achieved_hit_rate"], large["trace"]["achieved_hit_rate"]
    assert lo is not None and hi is not None
    assert hi > lo + 0.1, (lo, hi)
    assert hi <= best + ROUNDING and lo <= best + ROUNDING
