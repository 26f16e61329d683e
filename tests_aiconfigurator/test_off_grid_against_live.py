"""The aiconfigurator lane: what `plan` answers off the committed grid without the tool (interpolated ISL and
batch, OSL re-derived, prefill:decode ratios composed) is held against the tool's own answer for the same
configuration, and with the tool installed `plan` answers off-grid questions instead of asking to regenerate."""

from __future__ import annotations

import json

import pytest

from kimi_k3.commands import main as cli
from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing import perf

available, why = aic.available()
pytestmark = pytest.mark.skipif(not available, reason=f"aiconfigurator lane: {why}")

# Off-grid in every way the table-only path handles; each checked against aiconfigurator itself.
POINTS = [
    dict(mode="agg", system="gb300", tp=8, isl=8000, osl=1000, batch=4),  # the 8000/1000
    dict(mode="agg", system="gb300", tp=8, isl=32768, osl=4096, batch=16),  # longer answers
    dict(mode="agg", system="gb300", tp=8, isl=100000, osl=2000, batch=8),  # ISL, OSL and batch off grid
    dict(mode="agg", system="gb200", tp=16, isl=32768, osl=256, batch=16),  # shorter answers
    dict(mode="agg", system="gb300", tp=16, isl=32768, osl=4096, batch=16),  # no pure-decode row of its own
    dict(
        mode="disagg",
        system="gb300",
        prefill_tp=8,
        prefill_workers=1,
        decode_tp=8,
        decode_workers=3,
        isl=32768,
        osl=2000,
        decode_batch=16,
    ),  # a composed P:D ratio
]
TOLERANCE = 0.12  # measured 2026-12-01: worst 9.6% (TPOT at ISL 100,000 / OSL 2,000 / batch 8), most under 5%


@pytest.mark.parametrize("point", POINTS, ids=aic.point_key)
def test_table_only_answer_is_within_tolerance_of_the_tool(point):
    live = aic.estimate(point)
    derived, source = perf.raw_estimate(point, live=False)
    assert source != "aiconfigurator"
    for metric in ("ttft_ms", "tpot_ms", "tokens_per_second"):
        assert derived[metric] == pytest.approx(live[metric], rel=TOLERANCE), (metric, source)


def test_plan_off_grid_with_the_tool_installed_answers(capsys):
    """Issue 20: it printed 'regenerate it with the tool installed' for every context while it was installed."""
    assert cli.main(["plan", "--gpu", "gb300", "--tp", "8", "--isl", "8000", "--osl", "1000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["performance"]
    assert out["source"] == "aiconfigurator (live)"
    answered = [c for c in out["curves"] if "error" not in c]
    assert {c["isl"] for c in answered} >= {8192, 32768, 131072}
    assert not any("regenerate" in c.get("error", "") for c in out["curves"])


def test_sla_off_grid_with_the_tool_installed_lists_layouts(capsys):
    assert cli.main(["plan", "--sla", "ttft_ms=2000,tpot_ms=50", "--isl", "8000", "--osl", "1000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layouts"]
