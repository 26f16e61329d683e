"""`kimi-k3 rehearse STACK --trace FILE --plan-config` (issue 21, kimi_k3/rehearsal/trace_confirm.py): the config is
plan --trace's workers at the replay's timing, an aggregated stack is refused with one message, a growing queue is
not "bounded" and a stable one is, the SLA reads p99 at the model's pace against the stack's alert thresholds."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from kimi_k3.errors import UserError
from kimi_k3.rehearsal import trace_confirm

RATIO = {"prefill_workers_needed": 1.284, "decode_workers_needed": 0.32, "workers": {"prefill": 2, "decode": 1}}
ALERTS = {"ttftP95Seconds": 30, "itlP95Seconds": 0.2}


def test_config_is_plans_workers_at_unit_speed_and_scales_with_the_replay():
    c = trace_confirm.plan_config(RATIO, 1.0, 1.0)
    assert (c["prefill"], c["decode"]) == (2, 1) == (RATIO["workers"]["prefill"], RATIO["workers"]["decode"])
    fast = trace_confirm.plan_config(RATIO, 4.0, 1.0)  # 4x the arrivals on the same workers: ceil(5.136), ceil(1.28)
    assert (fast["prefill"], fast["decode"]) == (6, 2)
    quick = trace_confirm.plan_config(RATIO, 1.0, 20.0)  # mockers 20x faster: one of each is plenty
    assert (quick["prefill"], quick["decode"]) == (1, 1)


def _samples(levels):
    return [{"t": 2.0 * i, "inflight": v} for i, v in enumerate(levels)]


def test_a_growing_queue_is_not_bounded_a_stable_one_is():
    assert trace_confirm.queues_bounded(_samples([2, 3, 2, 3, 2, 3, 2, 3]))["bounded"] is True
    assert trace_confirm.queues_bounded(_samples([1, 3, 5, 7, 9, 11, 13, 15]))["bounded"] is False
    assert trace_confirm.queues_bounded(_samples([1, 2]))["bounded"] is None


def test_sla_is_p99_at_the_models_pace_against_the_alert_thresholds():
    run = {"requests": 4, "ttft_ms": {"p99": 1600.0}, "itl_ms": {"p99": 12.0}}
    assert trace_confirm.sla_held(run, ALERTS, 1.0)["held"] is True
    slowed = trace_confirm.sla_held(run, ALERTS, 20.0)  # 20x faster mockers: 240 ms ITL at the model's pace
    assert slowed["held"] is False and slowed["p99_at_model_pace"]["itl_ms"] == 240.0
    assert trace_confirm.sla_held({}, ALERTS, 1.0)["held"] is None


def test_confirmed_needs_every_request_served():
    run = {"requests": 3, "ttft_ms": {"p99": 1.0}, "itl_ms": {"p99": 1.0}}
    v = trace_confirm.verdict(trace_confirm.plan_config(RATIO, 1, 1), _samples([1] * 8), run, 4, ALERTS, 1.0)
    assert v["queues"]["bounded"] and v["sla"]["held"] and not v["all_served"] and v["confirmed"] is False


def test_an_aggregated_graph_is_refused():
    from types import SimpleNamespace

    agg = SimpleNamespace(roles=(SimpleNamespace(type="decode", replicas=2),))
    with pytest.raises(UserError, match="gb300 is aggregated"):
        trace_confirm.apply(agg, {"prefill": 2, "decode": 1}, "gb300")


@pytest.mark.parametrize("stack, extra, want", [("gb300-disagg", [], "give it with --trace FILE")])
def test_plan_config_without_a_trace_is_one_clear_error(stack, extra, want, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "kimi_k3", "rehearse", stack, "--out", str(tmp_path / "o"), "--plan-config", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and want in r.stdout + r.stderr and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "o").exists()
