"""`plan --trace` against the rehearsal's measured prefill/decode balance (issue 21), on real traffic: the first 200
requests of the Mooncake FAST'25 conversation trace replayed through `kimi-k3 rehearse gb300-disagg` (what
`make rehearse STACK=gb300-disagg TRACE=... REHEARSE_ARGS="--trace-first 200 --speedup-ratio 20"` runs), its mockers
timed by the performance model 20x faster so one prefill worker keeps up on 2 cores.

What the rehearsal can measure honestly: the prefill workers' busy request-seconds per second (Little's law on the
mocker's request_duration_seconds_sum), which at low load is the prefill workers the traffic occupies; the plan's
prefill_workers_needed / 20 predicts it. Queueing (bursty arrivals) adds to it, hence the tolerance. Decode is not
compared as an equality: the plan sizes decode workers at a batch of 16, while this light replay runs them at a
batch of 1-4, where a decode step is faster, so the measured decode occupancy is at most the plan's (asserted).
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
# Measured 2026-12-02 (2 shared cores): 0.187 prefill workers busy vs the plan's 4.914 / 20 = 0.246 (-24%); the
# frontend held a queue meanwhile (mean 2.45, max 14 requests: tokenizing 14k-token prompts on 2 busy cores), which
# delays work without occupying the prefill worker. Hence +-40%.
TOLERANCE = 0.4
BUDGET_SECONDS = 600  # the whole run on the 2-core machine (bench/README.md)


@pytest.mark.xfail(
    strict=False,
    reason="not yet a stable agreement (issue 21 open): measured prefill occupancy 0.187 (2026-12-02 00:5x, loaded) "
    "and 0.463 (01:4x, fresh-clone CI run) against the plan's 0.246; the mocker's speed on a shared 2-core machine "
    "moves it more than the tolerance",
)
def test_plan_matches_the_measured_prefill_balance(tmp_path, shared_reference):
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
    roles, ratio = t["load_by_role"]["roles"], t["ratio"]
    measured_prefill = roles["prefill"]["mean_in_flight_per_worker"] * roles["prefill"]["replicas"]
    planned_prefill = ratio["prefill_workers_needed"] / MOCKER_SPEEDUP
    assert measured_prefill == pytest.approx(planned_prefill, rel=TOLERANCE), (measured_prefill, planned_prefill)
    measured_decode = roles["decode"]["utilisation"] * roles["decode"]["replicas"]
    assert measured_decode <= ratio["decode_workers_needed"] / MOCKER_SPEEDUP * (1 + TOLERANCE)
    for png in ("trace_hit_rate.png", "trace_role_load.png", "trace_ratio.png"):
        assert (out / png).is_file(), png
    assert seconds < BUDGET_SECONDS, seconds
