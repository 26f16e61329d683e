"""`kimi-k3 rehearse gb300-disagg --trace FILE` with real processes (issue 21): AIPerf replays a small mooncake_trace
this test writes itself, and the report's `trace` section carries the best hit rate any cache could reach on it
beside the one the frontend measured, which never exceeds it. Marked `rehearse` (needs .venv-rehearse)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from test_rehearse_live import assert_nothing_left, rehearsal_venv  # noqa: F401 (the venv check, autouse)

pytestmark = pytest.mark.rehearse
# The frontend counts the chat-templated prompt as its fixture tokenizer re-tokenizes it (a few tokens more than the
# trace's input_length), so its 1536-token blocks sit a few tokens off the trace's: an absolute allowance for that.
ROUNDING = 0.03


def three_prefix_trace(n: int) -> list[dict]:
    """Request i opens with shared prefix i % 3 (hash ids 3 blocks = 1536 tokens, one TP8 block), then 1-3 blocks
    of its own; 300 ms apart."""
    out, own = [], 1000
    for i in range(n):
        k = 1 + i % 3 if i % 2 else 3 - i % 3
        ids = [10 * (1 + i % 3) + j for j in range(3)] + list(range(own, own + k))
        own += 10
        out.append(
            {"timestamp": 300 * i, "input_length": len(ids) * 512 - 7 * (i + 1), "output_length": 12, "hash_ids": ids}
        )
    return out


def test_trace_replay_reports_achieved_at_most_best(tmp_path):
    trace = three_prefix_trace(24)
    path = tmp_path / "team.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in trace))
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kimi_k3",
            "rehearse",
            "gb300-disagg",
            "--out",
            str(out),
            "--trace",
            str(path),
            "--trace-first",
            "20",
            "--trace-speedup",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    t = report["trace"]
    assert report["block_size"] == t["block_size"] == 1536
    # By hand: of the first 20, requests 0, 1, 2 are the first to hold their prefix (nothing cached); each of the
    # other 17 finds its whole first 1536-token block cached and nothing after it (its own blocks are new).
    isl = sum(r["input_length"] for r in trace[:20])
    assert t["requests"] == 20 and t["duration_s"] == 5.7 and t["replay_seconds"] == 2.85
    assert t["best_hit_rate"] == pytest.approx(17 * 1536 / isl, abs=1e-4)
    assert report["load"]["requests"] == 20  # AIPerf sent every selected request
    achieved = t["achieved_hit_rate"]
    assert achieved == report["kv_hit_rate"]
    assert 0 < achieved <= t["best_hit_rate"] + ROUNDING, (achieved, t["best_hit_rate"])
    # what AIPerf replayed: the first 20 lines, unchanged
    assert (out / "trace.jsonl").read_text() == "".join(path.read_text().splitlines(keepends=True)[:20])
    md = (out / "report.md").read_text()
    assert "vs the best any cache could reach on this trace at block size 1536" in md
    assert_nothing_left(out)
