"""`plan --trace` against the rehearsal's measured prefill/decode balance (issue 21), on real traffic: the first 200
requests of the Mooncake FAST'25 conversation trace replayed through `kimi-k3 rehearse gb300-disagg` (what
`make rehearse STACK=gb300-disagg TRACE=... REHEARSE_ARGS="--trace-first 200 --speedup-ratio 20"` runs), its mockers
timed by the performance model 20x faster so one prefill worker keeps up on 2 cores.

What the rehearsal can measure honestly: the prefill workers' busy request-seconds per second (Little's law on the
mocker's request_duration_seconds_sum). It is at least what the mockers' own timing predicts (the report's
ratio.prefill_workers_busy_by_mocker_timing): waiting inside the worker and the shared cores' delays only add to
it, by 3-160% across runs, so it is asserted as a lower bound. It is not compared with the plan's
prefill_workers_needed / 20: the plan's prefill rate is 1.36x slower than the mockers' table
(tests/unit/test_trace_balance_model.py says why). Decode is a bound too: the plan sizes decode workers at a batch
of 16, this light replay runs them at 1-4, where a decode step is faster.
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
# Prefill: the measured occupancy is at least the mockers' own timing's (0.181 for this window) less FLOOR; it
# measured 0.187 (00:5x, loaded), 0.463 (01:4x, a fresh-clone CI run) and 0.289 (04:2x), so no upper bound holds on
# a shared 2-core machine. Decode: at most the plan's figure + TOLERANCE (the plan sizes decode at a batch of 16).
FLOOR, TOLERANCE = 0.2, 0.4  # FLOOR: the mockers' figure reads the table clamped; extrapolated it is 13% less
BUDGET_SECONDS = 600  # the whole run on the 2-core machine (bench/README.md)


def test_measured_prefill_balance_is_at_least_the_mockers_timing(tmp_path, shared_reference):
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
    # The rehearsal measures the mockers' timing, which the plan's per-worker prefill rate does not share (1.36x
    # slower in the plan: tests/unit/test_trace_balance_model.py); the comparison is with the mockers' own.
    # A lower bound only: Little's law counts a request's waiting inside the worker (and the shared cores' delays)
    # as busy, never less than its modelled service. Measured 0.187, 0.289, 0.463 (three runs) against 0.181.
    expected_prefill = ratio["prefill_workers_busy_by_mocker_timing"]
    assert measured_prefill >= expected_prefill * (1 - FLOOR), (measured_prefill, expected_prefill)
    measured_decode = roles["decode"]["utilisation"] * roles["decode"]["replicas"]
    assert measured_decode <= ratio["decode_workers_needed"] / MOCKER_SPEEDUP * (1 + TOLERANCE)
    for png in ("trace_hit_rate.png", "trace_role_load.png", "trace_ratio.png"):
        assert (out / png).is_file(), png
    assert seconds < BUDGET_SECONDS, seconds
