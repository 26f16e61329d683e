"""The trace replay's report sections (issue 21, kimi_k3/rehearsal/trace_report.py) from metric samples written by
hand: the hit rate per window, each role's load, the P:D ratio's sensitivity moving the expected way, the API's bill
priced by hand from recipes/facts/api-prices.yaml, and PNG plots that carry the figures they show."""

from __future__ import annotations

import dataclasses
import json
import zlib
from types import SimpleNamespace

import pytest

from kimi_k3.rehearsal import plots, trace_report, trace_sections, trace_sizing
from kimi_k3.rehearsal.report import render_markdown
from kimi_k3.sizing import perf
from kimi_k3.sizing.trace_cache import Request


def _sample(t, inp, cached, out, queued=0, busy=(0, 0, 0), reqs=(0, 0, 0), infl=(0, 0, 0)):
    names = (("prefill-0", "prefill"), ("decode-0", "decode"), ("decode-1", "decode"))
    return {
        "t": t,
        "input": inp,
        "cached": cached,
        "output": out,
        "queued": queued,
        "workers": {
            n: {"role": r, "busy": b, "requests": q, "inflight": i} for (n, r), b, q, i in zip(names, busy, reqs, infl)
        },
    }


PLAN = SimpleNamespace(
    roles=[
        SimpleNamespace(key="prefill", mode="prefill", replicas=1),
        SimpleNamespace(key="decode", mode="decode", replicas=2),
    ]
)
SAMPLES = [
    _sample(0, 0, 0, 0),
    _sample(2, 10_000, 0, 100, queued=2, busy=(1.0, 2, 2), reqs=(4, 2, 2), infl=(1, 2, 1)),
    _sample(4, 20_000, 6_000, 300, queued=0, busy=(1.5, 6, 6), reqs=(8, 4, 4), infl=(0, 1, 1)),
    _sample(6, 30_000, 14_000, 400, busy=(2.0, 8, 8), reqs=(12, 6, 6)),
]


def test_hit_rate_per_window():
    w = trace_report.hit_windows(SAMPLES, windows=3)
    assert [x["hit_rate"] for x in w] == [0.0, 0.6, 0.8]
    assert [(x["t0_s"], x["t1_s"]) for x in w] == [(0, 2), (2, 4), (4, 6)]
    merged = trace_report.hit_windows(SAMPLES, windows=2)
    assert [x["hit_rate"] for x in merged] == [0.3, 0.8]  # (0 + 6k) / 20k, then 8k / 10k


def test_load_per_role():
    load = trace_report.role_load(PLAN, SAMPLES)
    p, d = load["roles"]["prefill"], load["roles"]["decode"]
    assert load["replay_wall_s"] == 6
    assert (
        p["prefill_tokens_per_s"] == pytest.approx((30_000 - 14_000) / 6, abs=0.1) and p["decode_tokens_per_s"] is None
    )
    assert d["decode_tokens_per_s"] == pytest.approx(400 / 6, abs=0.1) and d["prefill_tokens_per_s"] is None
    assert p["requests"] == 12 and d["requests"] == 12
    assert p["mean_in_flight_per_worker"] == pytest.approx(2 / 6, abs=1e-3) and p["utilisation"] == pytest.approx(0.333)
    assert d["mean_in_flight_per_worker"] == pytest.approx(16 / 6 / 2, abs=1e-3)
    assert d["utilisation"] == pytest.approx(16 / 6 / 2 / perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER, abs=1e-3)
    assert p["peak_in_flight"] == 1 and d["peak_in_flight"] == 3
    assert load["frontend_queued"] == {"mean": 0.5, "max": 2}


def _trace(n=30, own=16, osl=300):
    return [
        Request(1000.0 * i, 512 * (4 + own), osl, (1, 2, 3, 4) + tuple(100 * (i + 1) + k for k in range(own)))
        for i in range(n)
    ]


def test_ratio_sensitivity_moves_the_expected_way():
    r = trace_sizing.ratio(_trace(), "gb300", 8, 8, 1536)
    s = r["sensitivity"]
    assert s["osl x0.75"]["decode_per_prefill"] < r["decode_per_prefill"] < s["osl x1.25"]["decode_per_prefill"]
    assert s["isl x0.75"]["prefill_gpu_share"] < r["prefill_gpu_share"] < s["isl x1.25"]["prefill_gpu_share"]


def test_api_bill_prices_input_cached_and_output_separately():
    """Two requests: the second repeats the first's 3-block (1536 tokens at block 512... here 1536) prefix."""
    reqs = [Request(0, 2048, 100, (1, 2, 3, 4)), Request(1000, 2048, 100, (1, 2, 3, 9))]
    c = trace_sizing.cost(reqs, 1536, used_cost_per_hour=36.0, capacity_rps=2.0, achieved_hit_rate=0.25)
    m, hit, out = (c["api_price_usd_per_mtok"][k] for k in ("input_cache_miss", "input_cache_hit", "output"))
    # by hand: request 1 nothing cached; request 2 its first 1536-token block cached
    first = (2048 * m + 100 * out) / 1e6
    second = ((2048 - 1536) * m + 1536 * hit + 100 * out) / 1e6
    assert c["api_usd_per_request_best_cache"] == pytest.approx((first + second) / 2, abs=1e-6)
    achieved = ((2048 * 0.75) * m + 2048 * 0.25 * hit + 100 * out) / 1e6
    assert c["api_usd_per_request_achieved_cache"] == pytest.approx(achieved, abs=1e-6)
    assert c["stack_usd_per_request_at_trace_rate"] == pytest.approx(36.0 / 3600, abs=1e-6)  # 1 req/s
    assert c["stack_usd_per_request_at_capacity"] == pytest.approx(36.0 / 7200, abs=1e-6)
    assert c["stack_keeps_up"] is True
    assert trace_sizing.cost(reqs, 1536, 36.0, 0.5, None)["stack_keeps_up"] is False  # 0.5 req/s < 1 req/s


def _png_description(path) -> dict:
    data, i = path.read_bytes(), 8
    while i < len(data):
        n = int.from_bytes(data[i : i + 4], "big")
        kind, body = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        if kind == b"tEXt" and body.startswith(b"Description\0"):
            return json.loads(body.split(b"\0", 1)[1])
        if kind == b"zTXt" and body.startswith(b"Description\0"):
            return json.loads(zlib.decompress(body.split(b"\0", 1)[1][1:]))
        if kind == b"iTXt" and body.startswith(b"Description\0"):
            return json.loads(body.split(b"\0", 5)[-1])
        i += 12 + n
    raise AssertionError(f"{path}: no Description chunk")


def test_plots_and_markdown_carry_the_reports_figures(tmp_path):
    t = {
        "file": "t.jsonl",
        "requests": 30,
        "duration_s": 29.0,
        "replay_seconds": 29.0,
        "speedup": 1.0,
        "isl": {"p50": 10240, "p90": 10240, "p99": 10240},
        "osl": {"p50": 300, "p90": 300, "p99": 300},
        "block_size": 1536,
        "best_hit_rate": 0.19,
        "achieved_hit_rate": 0.15,
        "hit_rate_windows": trace_report.hit_windows(SAMPLES, 3),
        "load_by_role": trace_report.role_load(PLAN, SAMPLES),
        "ratio": trace_sizing.ratio(_trace(), "gb300", 8, 8, 1536),
        "cost": trace_sizing.cost(_trace(), 1536, 36.0, 2.0, 0.15),
    }
    report = {"stack": "gb300-disagg", "runs": {}, "worker_requests": {}, "roles": {}, "trace": t}
    files = plots.draw(report, tmp_path)
    assert files == ["trace_hit_rate.png", "trace_role_load.png", "trace_ratio.png"]
    assert _png_description(tmp_path / "trace_hit_rate.png") == {"hit_rate": [0.0, 0.6, 0.8], "best_hit_rate": 0.19}
    load = t["load_by_role"]["roles"]
    assert _png_description(tmp_path / "trace_role_load.png") == {
        "tokens_per_s": {
            "prefill": load["prefill"]["prefill_tokens_per_s"],
            "decode": load["decode"]["decode_tokens_per_s"],
        }
    }
    ratio = _png_description(tmp_path / "trace_ratio.png")["decode_per_prefill"]
    assert ratio["as recorded"] == t["ratio"]["decode_per_prefill"] and set(ratio) == {
        "as recorded",
        "isl x0.75",
        "isl x1.25",
        "osl x0.75",
        "osl x1.25",
    }
    md = "\n".join(trace_sections.markdown(t))
    for part in (
        "## Trace: load per role",
        "| prefill (prefill) | 1 | 12 |",
        "| 2-4 | 10,000 | 6,000 | 60.0% |",
        "## Trace: prefill:decode ratio",
        "| OSL X1.25 |",
        "the API (",
        "at the achieved hit rate",
    ):
        assert part in md, part
    full = {
        "stack": "s",
        "failure": None,
        "smoke": {"passed": True, "checks": {}},
        "ready_seconds": 1.0,
        "block_size": 1536,
        "max_model_len": 1,
        "kv_hit_rate": 0.15,
        "workers": [],
        "roles": {},
        "runs": {},
        "worker_requests": {},
        "smoke_failures": {},
        "trace": t,
    }
    assert "## Trace: KV hit rate over time" in render_markdown(full, files)


def test_load_is_measured_over_the_replay_not_aiperfs_setup():
    idle = [_sample(t, 0, 0, 0) for t in (0, 2, 4)]
    shifted = [dict(s, t=s["t"] + 4) for s in SAMPLES[1:]]
    tail = [dict(shifted[-1], t=14), dict(shifted[-1], t=16)]
    got = trace_report.active(idle + shifted + tail)
    assert [s["t"] for s in got] == [4, 6, 8, 10]
    assert trace_report.role_load(PLAN, got)["replay_wall_s"] == 6


def test_fcfs_queue_by_hand():
    from kimi_k3.sizing.trace_plan import fcfs_busy

    assert fcfs_busy([0, 0, 0], [1, 1, 1], 1) == pytest.approx(1 + 2 + 3)  # each waits for those before it
    assert fcfs_busy([0, 0, 0], [1, 1, 1], 2) == pytest.approx(1 + 1 + 2)
    assert fcfs_busy([0, 5, 10], [1, 1, 1], 1) == pytest.approx(3)  # apart: nobody waits


def test_in_flight_at_replay_reads_the_reports_ratio():
    """The report's ratio (what trace_report.measured passes) carries what the replay's figures need."""
    apart = _trace()  # 1 s apart, each prefill well under 1 s: no waiting
    r = trace_sizing.ratio(apart, "gb300", 8, 8, 1536, 256)
    f = trace_sizing.in_flight_at_replay(apart, r, {"prefill": 1, "decode": 2}, 256)
    assert f["prefill_fcfs"] == pytest.approx(f["prefill_alone"], rel=1e-3)
    assert f["prefill_alone"] == pytest.approx(r["in_flight_alone"]["prefill"], rel=0.05)
    twice = trace_sizing.in_flight_at_replay(apart, r, {"prefill": 1, "decode": 2}, 256, mocker_speedup=2.0)
    assert twice["prefill_alone"] == pytest.approx(f["prefill_alone"] / 2, rel=1e-3)
    # apart, nothing waits in the simulated worker either: each prompt in steps of the mocker's default 8,192-token
    # budget (the layout sets none), read one by one
    from kimi_k3.sizing import mocker, trace_plan

    chunked = trace_plan.prefill_seconds(apart, 1536, mocker.disagg_profile("gb300", 8, 8, 256), 8192)
    assert twice["prefill_simulated"] == pytest.approx(sum(chunked) / 2 / 30.0, rel=1e-3)  # 30 requests, 1 s apart
    burst = [dataclasses.replace(q, timestamp_ms=q.timestamp_ms // 10_000) for q in apart[:-1]] + apart[-1:]
    g = trace_sizing.in_flight_at_replay(burst, r, {"prefill": 1, "decode": 2}, 256)
    assert g["prefill_fcfs"] > 2 * g["prefill_alone"]  # 29 at once then one late: they queue


def test_the_reports_ratio_keeps_the_prefill_token_budget_for_the_replay():
    """ratio() once dropped prefill_token_budget, so in_flight_at_replay timed each prompt in one step, unchunked."""
    from kimi_k3.sizing import mocker, trace_plan

    long = [dataclasses.replace(q, input_length=40_000, hash_ids=[]) for q in _trace()]
    r = trace_sizing.ratio(long, "gb300", 8, 8, 1536, 256, prefill_token_budget=4096)
    assert r["prefill_token_budget"] == 4096
    f = trace_sizing.in_flight_at_replay(long, r, {"prefill": 1, "decode": 2}, 256)
    profile = mocker.disagg_profile("gb300", 8, 8, 256)
    chunked = sum(trace_plan.prefill_seconds(long, 1536, profile, 4096))
    whole = sum(trace_plan.prefill_seconds(long, 1536, profile, None))
    assert chunked != pytest.approx(whole, rel=1e-3)  # the budget matters at 40k tokens
    span = (long[-1].timestamp_ms - long[0].timestamp_ms) / 1000 * len(long) / (len(long) - 1)
    assert f["prefill_alone"] == pytest.approx(chunked / span, rel=1e-3)
