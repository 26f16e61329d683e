"""Self-hosted cost against the API price a team would otherwise pay (issue 20), and every cost figure naming its
basis: the Capacity Block billed whole vs only the GPUs used (issue 25 class 9: $339 vs $113, unexplained)."""

from __future__ import annotations

import json

import pytest

from kimi_k3.blueprint import stack_plan
from kimi_k3.commands import main as cli
from kimi_k3.data import recipe_file
from kimi_k3.sizing import aic_table, api_cost, perf
from kimi_k3.sizing import layout as perf_layout

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")


@pytest.fixture(autouse=True)
def _table_only(monkeypatch):
    monkeypatch.setattr(aic_table, "_live", lambda: False)


def _json(capsys, *argv: str) -> dict:
    assert cli.main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


K3 = api_cost.ApiPrice("kimi-k3", 3.00, 0.30, 15.00, "test", "2026-12-01")


def test_api_bill_by_hand():
    # 8,000 in (half cached), 1,000 out: 4,000 x $3 + 4,000 x $0.30 + 1,000 x $15 per million = $0.0282
    w = perf_layout.Workload(8000, 1000, cache_hit_rate=0.5)
    assert K3.per_request(w) == pytest.approx(0.0282)
    assert K3.per_request(perf_layout.Workload(8000, 1000)) == pytest.approx(0.039)  # no hits: 24,000 + 15,000


def test_break_even_by_hand():
    w = perf_layout.Workload(8000, 1000, cache_hit_rate=0.5)
    c = api_cost.cost_vs_api(
        w, K3, capacity_rps=3.0, bases={"capacity_block_billed_whole": 761.904, "gpus_used": 253.968}
    )
    assert c["api_usd_per_request"] == pytest.approx(0.0282)
    assert c["api_usd_per_million_output_tokens"] == pytest.approx(28.2)  # $0.0282 / 1,000 tokens
    assert c["requests_per_second"] == 3.0  # kept busy: at capacity
    block, used = c["bases"]["capacity_block_billed_whole"], c["bases"]["gpus_used"]
    # $761.904/h over 3 req/s = $0.070547 per request; break-even 761.904 / 3600 / 0.0282 = 7.505 req/s > 3
    assert block["usd_per_request"] == pytest.approx(761.904 / 3600 / 3, abs=1e-6)
    assert block["usd_per_million_output_tokens"] == pytest.approx(761.904 / 3600 / 3 / 1000 * 1e6, abs=1e-3)
    assert block["break_even_requests_per_second"] == pytest.approx(7.5049, abs=1e-4)
    assert not block["break_even_reachable"] and not block["cheaper_than_api"]
    # $253.968/h: break-even 2.5017 req/s = 83.4% of the 3 it carries; at 3 req/s it costs $0.023516 < $0.0282
    assert used["break_even_requests_per_second"] == pytest.approx(2.5017, abs=1e-4)
    assert used["break_even_utilization"] == pytest.approx(0.8339, abs=1e-4)
    assert used["break_even_reachable"] and used["cheaper_than_api"]
    # at a given, lower load the block costs more per request; the break-even does not move
    low = api_cost.cost_vs_api(w, K3, 3.0, {"gpus_used": 253.968}, request_rate=1.0)["bases"]["gpus_used"]
    assert low["usd_per_request"] == pytest.approx(253.968 / 3600, abs=1e-6) and not low["cheaper_than_api"]
    assert low["break_even_requests_per_second"] == used["break_even_requests_per_second"]


@pytest.mark.parametrize("stack", STACKS)
def test_plan_stack_compares_with_the_api_on_both_bases(stack, capsys):
    out = _json(capsys, stack, "--isl", "8192", "--cache-hit-rate", "0.5")
    c = out["performance"]["cost_vs_api"]
    price = recipe_file("facts/api-prices.yaml")["models"]["kimi-k3"]
    w = out["performance"]["workload"]
    api = (
        w["isl"] * 0.5 * price["input_cache_miss"]
        + w["isl"] * 0.5 * price["input_cache_hit"]
        + w["osl"] * price["output"]
    ) / 1e6
    assert c["api_usd_per_request"] == pytest.approx(api, abs=1e-6)
    bases = c["bases"]
    assert bases["gpus_used"]["usd_per_hour"] == out["used_cost_per_hour_usd"]
    if "capacity_block_billed_whole" in bases:
        assert bases["capacity_block_billed_whole"]["usd_per_hour"] == out["cost_per_hour_usd"]
        assert out["cost_basis"] == "capacity_block_billed_whole"
    for b in bases.values():  # the break-even load is the hour's cost over the API's bill per request
        assert b["break_even_requests_per_second"] == pytest.approx(b["usd_per_hour"] / 3600 / api, rel=1e-3)


def test_every_cost_figure_names_its_basis(capsys):
    """The $339 / $113 of issue 25: the same shape, two bases, neither named."""
    assert cli.main(["plan", "gb300-disagg"]) == 0
    text = capsys.readouterr().out
    line = next(l for l in text.splitlines() if l.startswith("$ per million output tokens"))
    assert "(the Capacity Block billed whole)" in line
    assert "only the GPUs used" in text and "what `plan --sla` counts" in text
    assert "self-hosted, Capacity Block billed whole" in text and "self-hosted, only the GPUs the stack uses" in text
    assert "API" in text and "per million output tokens (its input included)" in text
    out = _json(capsys, "gb300-disagg")
    assert out["usd_per_million_output_tokens"] > out["used_usd_per_million_output_tokens"]
    assert cli.main(["plan", "--sla", "ttft_ms=5000,tpot_ms=50", "--isl", "8192"]) == 0
    sla = capsys.readouterr().out
    assert "cost basis: only the GPUs a layout uses" in sla and "API (kimi-k3" in sla and "API break-even" in sla
    j = _json(capsys, "--sla", "ttft_ms=5000,tpot_ms=50", "--isl", "8192")
    assert j["cost_basis"] == "gpus_used" and all(x["cost_basis"] == "gpus_used" for x in j["layouts"])
    assert all("cost_vs_api" in x for x in j["layouts"])


def test_api_model_and_price_overrides(capsys):
    base = _json(capsys, "gb300", "--isl", "8192")["performance"]["cost_vs_api"]
    pro = _json(capsys, "gb300", "--isl", "8192", "--api-model", "kimi-k3.1-pro")["performance"]["cost_vs_api"]
    assert pro["api_model"] == "kimi-k3.1-pro"
    assert pro["api_usd_per_request"] == pytest.approx(base["api_usd_per_request"] * 2 / 3, rel=1e-4)
    free_out = _json(capsys, "gb300", "--isl", "8192", "--api-price", "output=0")["performance"]["cost_vs_api"]
    assert free_out["api_usd_per_request"] == pytest.approx(8192 * 3 / 1e6, abs=1e-6)
    assert "--api-price output=0" in free_out["api_price_source"]


def test_price_recipe_has_source_and_date_for_every_model():
    default, prices = api_cost.api_prices()
    assert default == "kimi-k3"
    assert (prices["kimi-k3"].input_cache_miss, prices["kimi-k3"].input_cache_hit, prices["kimi-k3"].output) == (
        3.0,
        0.3,
        15.0,
    )
    assert (prices["kimi-k3.1-pro"].input_cache_miss, prices["kimi-k3.1-pro"].output) == (2.0, 10.0)
    for p in prices.values():
        assert p.source.startswith("https://") and p.as_of


@pytest.mark.parametrize("value, shown", [(float("inf"), "inf"), (-1, "-1"), ("3 USD", "'3 USD'"), (True, "True")])
def test_bad_price_in_the_recipe_names_file_key_and_value(monkeypatch, value, shown):
    from kimi_k3 import data

    real = data.recipe_file

    def patched(name):
        out = real(name)
        if name == "facts/api-prices.yaml":
            out = json.loads(json.dumps(out))
            out["models"]["kimi-k3"]["output"] = value
        return out

    monkeypatch.setattr(api_cost, "recipe_file", patched)
    with pytest.raises(perf_layout.PerfError) as err:
        api_cost.api_prices()
    assert "recipes/facts/api-prices.yaml: models.kimi-k3.output" in str(err.value) and shown in str(err.value)


def test_plan_with_a_bad_price_recipe_is_one_message_not_a_traceback(monkeypatch, capsys):
    monkeypatch.setattr(
        perf,
        "api_prices",
        lambda: (_ for _ in ()).throw(
            perf_layout.PerfError(
                "recipes/facts/api-prices.yaml: models.kimi-k3.output = -1; allowed: a finite number >= 0"
            )
        ),
    )
    assert cli.main(["plan", "gb300"]) == 2
    err = capsys.readouterr().err
    assert "recipes/facts/api-prices.yaml: models.kimi-k3.output" in err and "Traceback" not in err


def test_stack_plan_cost_bases_are_the_planners():
    stack = stack_plan("gb300-disagg")
    from kimi_k3.commands import plan_perf

    bases = plan_perf.cost_bases(stack)
    assert bases["gpus_used"] == stack.used_cost_per_hour_usd
    assert bases.get("capacity_block_billed_whole", stack.cost_per_hour_usd) == stack.cost_per_hour_usd
