"""The aiconfigurator lane (`make test-perf`, run by .ci/run): the raw numbers `kimi-k3 plan` shows are
aiconfigurator's own for the same configuration. Calls the tool (a few seconds per point), so it is not in
`make test`; it skips, visibly, only where the `perf` extra is not installed."""

from __future__ import annotations

import pytest

from kimi_k3.blueprint import stack_plan
from kimi_k3.commands.plan_perf import layout_of
from kimi_k3.sizing import aic_table, calibration, perf
from kimi_k3.sizing import aiconfigurator as aic

available, why = aic.available()
pytestmark = pytest.mark.skipif(not available, reason=f"aiconfigurator lane: {why}")

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")


def _points() -> list[dict]:
    """Every stack's default point, and every public measurement's configuration."""
    out = []
    for name in STACKS:
        layout = layout_of(stack_plan(name))
        out.append(layout.point(perf.DEFAULT_ISL, perf.DEFAULT_OSL, perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER))
    out += [m["config"] for m in calibration.measurements()]
    return out


@pytest.mark.parametrize("point", _points(), ids=aic.point_key)
def test_committed_table_equals_aiconfigurator(point):
    committed = aic_table.raw_table()["points"][aic.point_key(point)]["estimate"]
    assert aic.estimate(point) == committed


@pytest.mark.parametrize("name", STACKS)
def test_plan_raw_numbers_are_aiconfigurator_numbers(name):
    stack = stack_plan(name)
    est = perf.estimate(layout_of(stack), perf.Workload())
    live = aic.estimate(layout_of(stack).point(perf.DEFAULT_ISL, perf.DEFAULT_OSL, est.batch))
    for metric in perf.METRICS:
        assert est.raw[metric] == live[metric], metric


@pytest.mark.parametrize("system, tp", aic.AGG_LAYOUTS)
def test_committed_memory_equals_aiconfigurator(system, tp):
    assert aic.memory(system, tp) == aic_table.raw_table()["memory_gib_per_gpu"][f"{system} tp{tp}"]
