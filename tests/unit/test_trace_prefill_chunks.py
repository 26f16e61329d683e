"""plan --trace times a long prompt's prefill as dynamo.mocker does: in steps of at most the prefill role's
--max-num-batched-tokens, each step read from the table at its own new tokens (lib/mocker/src/common/perf_model.rs
predict_prefill_time: batch x (isl - prefix); the vLLM scheduler's token budget per step). One read of the whole
prompt overstated prefill, and so prefill workers, by up to ~40% at 512k tokens on the gb300 table (review, issue 21)."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from kimi_k3.blueprint import Blueprint
from kimi_k3.sizing import mocker, trace_plan
from kimi_k3.sizing.trace_cache import Request

TABLE = {"prefill_isl": [100.0, 200.0], "prefill_ttft_ms": [10.0, 30.0]}  # 10 ms at 100 tokens, 30 at 200


def steps_ms(table, tokens, budget):
    """The mocker's loop, written out: take at most `budget` new tokens a step until the prompt is done."""
    total, left = 0.0, tokens
    while left > 0:
        step = min(left, budget)
        total += mocker.prefill_ms(table, step)
        left -= step
    return total


@pytest.mark.parametrize("tokens, budget", [(150, 200), (200, 200), (450, 200), (1000, 150), (301, 100)])
def test_a_prompt_is_timed_step_by_step_at_the_token_budget(tokens, budget):
    assert trace_plan.chunked_prefill_ms(TABLE, tokens, budget) == pytest.approx(steps_ms(TABLE, tokens, budget))


def test_no_budget_is_one_read():
    assert trace_plan.chunked_prefill_ms(TABLE, 450, None) == pytest.approx(mocker.prefill_ms(TABLE, 450))


def recipe_budget(recipe: str, role: str) -> int:
    data = yaml.safe_load((ROOT / "recipes" / "profiles" / f"{recipe}.yaml").read_text())
    return int(data["roles"][role]["args"]["--max-num-batched-tokens"])


@pytest.mark.parametrize("stack, role", [("gb300-disagg", "prefill"), ("gb200-disagg", "prefill")])
def test_the_graph_hands_the_prefill_roles_budget(stack, role):
    assert Blueprint.for_stack(stack).graph.prefill_token_budget == recipe_budget(stack, role)


def test_long_prompts_need_fewer_prefill_workers_than_one_read_says_short_ones_the_same():
    budget = recipe_budget("gb300-disagg", "prefill")
    kw = dict(gpu="gb300", prefill_tp=8, decode_tp=8, block_size=1536, max_num_seqs=256)

    def trace(isl):  # distinct prompts (no shared prefix), 1 request a second
        return [Request(timestamp_ms=1000 * i, input_length=isl, output_length=100, hash_ids=()) for i in range(20)]

    for isl, fewer in ((budget // 2, False), (16 * budget, True)):
        one = trace_plan.pd_ratio(trace(isl), **kw)
        chunked = trace_plan.pd_ratio(trace(isl), **kw, prefill_token_budget=budget)
        if fewer:
            assert chunked["prefill_workers_needed"] < 0.95 * one["prefill_workers_needed"], (isl, one, chunked)
        else:
            assert chunked["prefill_workers_needed"] == one["prefill_workers_needed"]
        assert chunked["prefill_token_budget"] == budget
