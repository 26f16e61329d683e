"""`kimi-k3 rehearse gb300-disagg --trace FILE --plan-config` with real processes (issue 21): the rehearsal deploys the
P:D config `kimi-k3 plan gb300-disagg --trace` prints for the replayed selection (2 prefill + 1 decode for this
traffic, not the stack's own 1 + 2), replays it, and reports that queues stayed bounded and the SLA held on the
mockers; and the KV hit rate per role from the KV router's own counters (AIPerf's scrape of the frontend's /metrics,
what the cluster Job reads too). Marked `rehearse`; bounded: 40 requests, 7.8 s of replay, 240 s in all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from test_rehearse_live import assert_nothing_left, rehearsal_venv  # noqa: F401 (the venv check, autouse)
from test_trace_rehearse_live import ROUNDING

pytestmark = pytest.mark.rehearse
N, GAP_MS, ISL = 40, 200, 3072  # 5 req/s of 3,072-token prompts: 1.19 prefill workers by the mockers' tables


def shared_block_trace() -> list[dict]:
    """Every request opens with the same 1536-token block (hash ids 1-3: one TP8 KV block), then its own blocks."""
    own = ISL // 512 - 3
    return [
        {
            "timestamp": GAP_MS * i,
            "input_length": ISL,
            "output_length": 24,
            "hash_ids": [1, 2, 3, *range(1000 + 20 * i, 1000 + 20 * i + own)],
        }
        for i in range(N)
    ]


def test_plan_config_runs_and_confirms_and_reports_hit_rate_per_role(tmp_path):
    path = tmp_path / "team.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in shared_block_trace()))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "kimi_k3"]
    result = subprocess.run(
        [*cmd, "rehearse", "gb300-disagg", "--out", str(out), "--trace", str(path), "--plan-config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert_nothing_left(out)
    t = json.loads((out / "report.json").read_text())["trace"]
    # The config is what `plan --trace` prints for the same selection (another command, read back as JSON).
    plan = json.loads(
        subprocess.run(
            [*cmd, "plan", "gb300-disagg", "--trace", str(out / "trace.jsonl"), "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    c = t["plan_config"]
    assert (c["prefill"], c["decode"]) == (plan["workers"]["prefill"], plan["workers"]["decode"]) == (2, 1)
    started = json.loads((out / "processes.json").read_text())
    assert sum(p["role"] == "prefill" for p in started) == 2 and sum(p["role"] == "decode" for p in started) == 1
    print(json.dumps({"plan_config": c, "hit_rate_by_role": t["hit_rate_by_role"]}, indent=1))
    assert c["all_served"] and c["requests_served"] == N
    assert c["queues"]["bounded"] is True, c["queues"]
    assert c["sla"]["held"] is True, c["sla"]
    assert c["confirmed"] is True and "performance model" in c["caveat"]
    # Per role, from the router's counters: prefill finds the shared block (never more than any cache could), the
    # decode workers publish no KV events (0), and each phase routed every replayed prompt token the frontend counted.
    roles = t["hit_rate_by_role"]
    assert set(roles) == {"prefill", "decode"}
    assert 0 < roles["prefill"]["hit_rate"] <= t["best_hit_rate"] + ROUNDING, (roles, t["best_hit_rate"])
    assert roles["decode"]["cached_tokens"] == 0
    assert roles["prefill"]["input_tokens"] == roles["decode"]["input_tokens"] >= N * ISL
    md = (out / "report.md").read_text()
    assert "KV hit rate per role" in md and "plan --trace config" in md
