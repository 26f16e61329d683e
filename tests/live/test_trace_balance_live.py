"""`plan --trace` against the rehearsal's measured prefill/decode balance (issue 21), on real traffic: the first 200
requests of the Mooncake FAST'25 conversation trace replayed through `kimi-k3 rehearse gb300-disagg` (what
`make rehearse STACK=gb300-disagg TRACE=... REHEARSE_ARGS="--trace-first 200 --speedup-ratio 20"` runs), its mockers
20x faster than the performance model so one prefill worker keeps up on 2 cores.

The plan times each role by the tables the mockers step by (tests/unit/test_trace_balance_model.py), so what the
rehearsal measures, requests in each role on average (Little's law on the mocker's request_duration_seconds_sum),
tests the plan's arithmetic on the real runtime: report.json's ratio.in_flight_at_replay is the plan's figure at
the replay's pace. Decode: measured / planned within +-TOLERANCE. Prefill: between the plan's two queueing
extremes, each request alone (less TOLERANCE) and one FCFS queue over the trace's own bursts (plus TOLERANCE):
the mocker batches prefills, so requests neither wait their turn whole nor never.
Marked `rehearse`; bounded (200 requests, 72 s of arrivals, 900 s in all)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from test_rehearse_live import assert_nothing_left, rehearsal_venv  # noqa: F401 (the venv check, autouse)
from test_trace_rehearse_live import ROUNDING

pytestmark = pytest.mark.rehearse
FIRST, MOCKER_SPEEDUP = 200, 20
TOLERANCE = 0.25  # docs/traces.md, bench/README.md
BUDGET_SECONDS = 600  # the whole run on the 2-core machine (bench/README.md)


def test_measured_balance_matches_plan_trace_within_the_tolerance(tmp_path, shared_reference):
    trace = shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl"
    out = tmp_path / "run"
    started = time.monotonic()
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
            str(trace),
            "--trace-first",
            str(FIRST),
            "--speedup-ratio",
            str(MOCKER_SPEEDUP),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert_nothing_left(out)
    report = json.loads((out / "report.json").read_text())
    t = report["trace"]
    print(
        json.dumps(
            {
                "seconds": round(seconds, 1),
                "load": report["load"],
                "achieved": t["achieved_hit_rate"],
                "best": t["best_hit_rate"],
                "load_by_role": t["load_by_role"],
                "ratio": t["ratio"],
                "cost": t["cost"],
            },
            indent=1,
        )
    )
    assert report["load"]["requests"] == FIRST
    assert t["achieved_hit_rate"] is not None and t["achieved_hit_rate"] <= t["best_hit_rate"] + ROUNDING
    roles, planned = t["load_by_role"]["roles"], t["ratio"]["in_flight_at_replay"]
    measured = {k: roles[k]["mean_in_flight_per_worker"] * roles[k]["replicas"] for k in ("prefill", "decode")}
    print(json.dumps({"measured_in_flight": measured, "planned": planned}))
    assert planned["decode_alone"] * (1 - TOLERANCE) <= measured["decode"] <= planned["decode_alone"] * (1 + TOLERANCE)
    assert planned["prefill_alone"] * (1 - TOLERANCE) <= measured["prefill"], (measured, planned)
    assert measured["prefill"] <= planned["prefill_fcfs"] * (1 + TOLERANCE), (measured, planned)
    for png in ("trace_hit_rate.png", "trace_role_load.png", "trace_ratio.png"):
        assert (out / png).is_file(), png
    assert seconds < BUDGET_SECONDS, seconds
