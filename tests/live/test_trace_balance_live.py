"""`plan --trace` against the rehearsal's measured prefill/decode balance (issue 21), on real traffic: the first 200
requests of the Mooncake FAST'25 conversation trace replayed through `kimi-k3 rehearse gb300-disagg` (what
`make rehearse STACK=gb300-disagg TRACE=... REHEARSE_ARGS="--trace-first 200 --speedup-ratio 20"` runs), its mockers
20x faster than the performance model so one prefill worker keeps up on 2 cores.

The plan times each role by the tables the mockers step by (tests/unit/test_trace_balance_model.py), so what the
rehearsal measures, requests in each role on average (Little's law on the mocker's request_duration_seconds_sum),
tests the plan's arithmetic on the real runtime: report.json's ratio.in_flight_at_replay is the plan's figure at
the replay's pace. Decode: measured / `decode_alone` within +-TOLERANCE. Prefill: measured / `prefill_simulated`
(kimi_k3/sizing/prefill_sim.py: the frontend's preprocessing lanes, then the prefill worker stepped as the mocker
steps it) within +-PREFILL_TOLERANCE, and the same simulation fed the arrival times the prefill worker logged
(its "request received" lines) within +-MOCKER_TOLERANCE of the measurement: the scheduler model alone.

Prefill is compared per second of the trace (the plan's unit): measured mean in flight x the measured window / the
trace's span (the window also holds the decode tail, when the prefill worker is idle); its logged per-request
durations give the same figure. Both tolerances follow one rule from the measured run-to-run spread, |mean
deviation| + 2.5 sd, over six runs (docs/traces.md, 2026-12-02 20:08-20:20 UTC, load average 0.2-1.3): measured
prefill 0.548, 0.573, 0.533, 0.545, 0.556, 0.568 per trace second against 0.589 simulated (deviation -7.0%, -2.7%,
-9.5%, -7.5%, -5.6%, -3.5%: mean -6.0%, sd 2.5%: 12.3%) -> PREFILL_TOLERANCE 15%; the simulation at the logged
worker arrivals 0.574, 0.565, 0.525, 0.535, 0.553, 0.514 against the logged 0.548, 0.573, 0.533, 0.546, 0.556, 0.568
(+4.7%, -1.4%, -1.5%, -2.0%, -0.7%, -9.5%: mean -1.7%, sd 4.5%: 13.0%; the live steps run a little slower than
the table, more so on a busier machine) -> MOCKER_TOLERANCE 15%. The frontend's cost per prompt token grows with
the machine's load, which spreads each burst wider at the worker and lowers the measurement (earlier runs at load
11-14: 0.327-0.563 by the wall window): under such load the plan check can fail where the mocker check should
hold (not rerun at load 11-14), and the printed frontend-to-prefill delay says why. Three runs of this test
(20:21-20:25 UTC, load 0.8-0.9) passed: prefill 0.569, 0.563, 0.571 per trace second; scheduler -4.1%, -0.7%, -1.8%.
With two busy loops beside it (load 3.1): passed, frontend-to-prefill 80 ms, prefill -6.2%, scheduler -1.1%.
Marked `rehearse`; bounded (200 requests, 72 s of arrivals, 900 s in all)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from test_rehearse_live import assert_nothing_left, rehearsal_venv  # noqa: F401 (the venv check, autouse)
from test_trace_rehearse_live import ROUNDING

pytestmark = pytest.mark.rehearse
FIRST, MOCKER_SPEEDUP = 200, 20
TOLERANCE = 0.25  # decode; docs/traces.md, bench/README.md
PREFILL_TOLERANCE = 0.15  # measured per trace second / prefill_simulated (the docstring's figures)
MOCKER_TOLERANCE = 0.15  # logged / simulated at the prefill worker's logged arrivals (the docstring's figures)
BUDGET_SECONDS = 600  # the whole run on the 2-core machine (bench/README.md)


def _log_lines(path: Path):
    for line in path.read_text(errors="replace").splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        yield datetime.fromisoformat(line[:26]).timestamp() if line[:4].isdigit() else None, line


def worker_arrivals(out: Path) -> list[dict]:
    """Per replayed request (trace line, from AIPerf's export): when the frontend and the prefill worker logged it
    received, when the prefill worker logged it completed (seconds)."""
    internal, frontend = {}, {}
    for t, line in _log_lines(out / "logs" / "frontend.log"):
        m = re.search(r"metrics: request received request_id=(\S+) .*x_request_id=\"([^\"]+)\"", line)
        if m:
            internal[m.group(2)], frontend[m.group(1)] = m.group(1), t
    seen: dict[str, dict[str, float]] = {}
    for t, line in _log_lines(out / "logs" / "prefill-0.log"):
        m = re.search(r"request (received|completed) request_id=(\S+)", line)
        if m:
            seen.setdefault(m.group(2), {})[m.group(1)] = t
    rows = [json.loads(x) for x in (out / "aiperf" / "trace" / "profile_export.jsonl").read_text().splitlines()]
    out_rows = []
    for r in rows:
        rid = internal[r["metadata"]["x_request_id"]]
        out_rows.append({"line": r["metadata"]["session_num"], "frontend": frontend[rid], **seen[rid]})
    return out_rows


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
    # the scheduler model alone: the prefill workers simulated at the arrival times the worker logged
    from kimi_k3.rehearsal.trace_sizing import MOCKER_DEFAULT_MAX_NUM_SEQS, TIMER_MS
    from kimi_k3.sizing import prefill_sim, trace_cache

    arrived = sorted(worker_arrivals(out), key=lambda a: a["received"])
    trace_requests = [trace_cache.parse_line(x, "trace") for x in (out / "trace.jsonl").read_text().splitlines() if x]
    cached = trace_cache.cacheable_tokens(trace_requests, t["ratio"]["block_size"])
    t0 = min(a["frontend"] for a in arrived)
    r = t["ratio"]
    at_logged = prefill_sim.simulate(
        [a["received"] - t0 for a in arrived],
        [trace_requests[a["line"]].input_length for a in arrived],
        [cached[a["line"]] for a in arrived],
        {k: v.tolist() for k, v in np.load(out / "perf_profile.npz").items()},  # the table the mockers ran
        token_budget=r["prefill_token_budget"],
        max_num_seqs=planned.get("prefill_max_num_seqs", MOCKER_DEFAULT_MAX_NUM_SEQS),
        speedup=MOCKER_SPEEDUP,
        floor_ms=TIMER_MS,
    )
    span = (trace_requests[-1].timestamp_ms - trace_requests[0].timestamp_ms) / 1000 * FIRST / (FIRST - 1)
    # prefill request-seconds per second of the trace, the plan's unit (the measured window also holds the decode
    # tail after the last prefill, idle for the prefill worker)
    per_trace_second = measured["prefill"] * t["load_by_role"]["replay_wall_s"] / span
    logged = {
        "measured_per_trace_second": round(per_trace_second, 4),
        "measured_from_log": round(sum(a["completed"] - a["received"] for a in arrived) / span, 4),
        "simulated_at_logged_arrivals": round(sum(at_logged) / span, 4),
        "frontend_to_prefill_ms_mean": round(1000 * sum(a["received"] - a["frontend"] for a in arrived) / FIRST, 1),
        "load_average": os.getloadavg(),
    }
    print(json.dumps({"prefill": {"measured": measured["prefill"], **planned, **logged}}))
    got, sim = logged["measured_from_log"], logged["simulated_at_logged_arrivals"]
    assert sim * (1 - MOCKER_TOLERANCE) <= got <= sim * (1 + MOCKER_TOLERANCE), (measured, logged)
    want = planned["prefill_simulated"]
    assert want * (1 - PREFILL_TOLERANCE) <= per_trace_second <= want * (1 + PREFILL_TOLERANCE), (measured, logged)
    for png in ("trace_hit_rate.png", "trace_role_load.png", "trace_ratio.png"):
        assert (out / png).is_file(), png
    assert seconds < BUDGET_SECONDS, seconds
