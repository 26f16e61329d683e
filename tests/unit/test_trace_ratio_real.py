"""The P:D ratio `plan --trace` recommends moves the expected way on real traffic (issue 21): the first 500 requests
of the Mooncake FAST'25 conversation trace with output lengths, then input lengths, scaled (arrivals and prefix hashes
unchanged; tests/cli/test_trace_plan.py does the same on traces written by hand)."""

from __future__ import annotations

import pytest

from kimi_k3.rehearsal import trace_sizing
from kimi_k3.sizing import trace_cache, trace_plan

LAYOUTS = {"gb300 TP8": ("gb300", 8, 8, 1536), "gb200 TP16": ("gb200", 16, 16, 768)}


@pytest.fixture(scope="module")
def conversation(shared_reference):
    text = (shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl").read_text()
    return trace_cache.select(text.split("\n"), "conversation", first=500, limit=500)[1]


def _ratio(requests, layout):
    gpu, ptp, dtp, block = LAYOUTS[layout]
    return trace_plan.pd_ratio(requests, gpu=gpu, prefill_tp=ptp, decode_tp=dtp, block_size=block)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_longer_outputs_more_decode_per_prefill(conversation, layout):
    ratios = [_ratio(trace_sizing._scaled(conversation, osl=f), layout) for f in (0.5, 1, 2)]
    per = [r["decode_per_prefill"] for r in ratios]
    assert per[0] < per[1] < per[2], per
    assert ratios[0]["prefill_workers_needed"] == ratios[2]["prefill_workers_needed"]  # prefill does not see outputs


@pytest.mark.parametrize("layout", LAYOUTS)
def test_longer_inputs_larger_prefill_share(conversation, layout):
    ratios = [_ratio(trace_sizing._scaled(conversation, isl=f), layout) for f in (0.75, 1, 1.5)]
    share = [r["prefill_gpu_share"] for r in ratios]
    assert share[0] < share[1] < share[2], share
    assert [r["mean_uncached_input"] for r in ratios] == sorted(r["mean_uncached_input"] for r in ratios)
