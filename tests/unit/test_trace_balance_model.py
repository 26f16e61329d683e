"""Why `plan --trace` and the rehearsal's measured prefill balance disagree (issue 21): not the measurement, the two
speeds. `plan --trace` times a prefill worker by aiconfigurator's raw prefill rate x PREFILL_SCALE (kimi_k3/sizing/
trace_plan.py), while the rehearsal's mockers step by the calibrated TTFT table kimi_k3/sizing/mocker.py writes for
them (24 points from 8,192 tokens; read clamped below that here, 48% of these prompts' new tokens). On the first 200
FAST'25 conversation requests the mocker's table keeps 3.6 prefill workers busy where the plan needs 4.9: the
plan's prefill is 1.36x slower than the mocker's. The rehearsal measured 0.187 busy at 20x (2026-12-02), the
mocker's table predicts 0.181, the plan 0.246. This test pins that gap: it fails once the two speeds are made one
(then tests/live/test_trace_balance_live.py can compare against the plan itself). At the table's own points (no
question of how the mocker reads below 8,192 tokens) the plan is 1.6x slower at 13,600 and 30,000 tokens."""

from __future__ import annotations

import pytest

from kimi_k3.blueprint import Blueprint
from kimi_k3.rehearsal.trace_sizing import mocker_prefill_busy
from kimi_k3.sizing import trace_cache, trace_plan

FIRST, SPEEDUP = 200, 20  # as tests/live/test_trace_balance_live.py replays it
MEASURED_2026_12_02 = 0.187  # that test's prefill occupancy on the loaded shared machine


@pytest.fixture(scope="module")
def graph():
    return Blueprint.for_stack("gb300-disagg").graph


def test_the_plans_prefill_is_slower_than_the_mockers_and_the_measurement_follows_the_mocker(shared_reference, graph):
    path = shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl"
    _, requests = trace_cache.select(trace_cache.read_lines(path, "--trace", 10**9), "t", first=FIRST, limit=10**7)
    tps = {r.type: r.tp for r in graph.roles}
    plan = trace_plan.pd_ratio(
        requests, gpu=graph.platform.name, prefill_tp=tps["prefill"], decode_tp=tps["decode"], block_size=1536
    )["prefill_workers_needed"]
    mocker = mocker_prefill_busy(requests, graph)
    assert mocker_prefill_busy(requests, graph, 2.0, SPEEDUP) == pytest.approx(mocker * 2 / SPEEDUP, rel=1e-3)
    assert plan == pytest.approx(4.914, abs=0.01)
    assert plan / mocker == pytest.approx(1.36, abs=0.05), (plan, mocker)  # the definitional gap, not noise
    # What the rehearsal measured agrees with the mockers' own timing, not with the plan's.
    assert MEASURED_2026_12_02 == pytest.approx(mocker / SPEEDUP, rel=0.1)
    assert MEASURED_2026_12_02 != pytest.approx(plan / SPEEDUP, rel=0.1)


@pytest.mark.parametrize("tokens", [13_600, 30_000])
def test_inside_the_mockers_table_the_plans_prefill_is_slower(tokens, graph):
    import numpy as np

    from kimi_k3.rehearsal.plan import perf_profile
    from kimi_k3.sizing import aic_table

    prof = perf_profile(graph)
    table_s = float(np.interp(tokens, prof["prefill_isl"], prof["prefill_ttft_ms"])) / 1000
    point = dict(mode="disagg", system="gb300", prefill_tp=8, prefill_workers=1, decode_tp=8, decode_workers=1)
    raw, _ = aic_table.raw_estimate({**point, "isl": tokens, "osl": 343, "decode_batch": 16}, live=False)
    plan_s = 1 / (raw[aic_table.RATES[0]] * aic_table.PREFILL_SCALE)  # trace_plan.pd_ratio's prefill time
    assert plan_s / table_s == pytest.approx(1.6, abs=0.05), (plan_s, table_s)
