"""Issue 22: an SGLang stack rehearses like the four: ready, every smoke check passed, the load run and its report,
over the mocker's SGLang scheduler (`--engine-type sglang`). Its prefix reuse is read at the KV router (the mocker's
SGLang engine reports no cached tokens in usage: tests/unit/test_sglang_cache_evidence.py), so before that this
stack failed `repeated_prompt_cached` (cached_tokens=0) and never reached the load.

One stack (the disaggregated GB300 one: both roles, DCP on decode), bounded: 8 requests, 60 s cap, one run.
Marked `rehearse` (deselected in `make test`); `make test-rehearse` runs it."""

from __future__ import annotations

import json

import pytest
from test_rehearse_live import assert_nothing_left, rehearsal_venv, rehearse  # noqa: F401 (the venv check, autouse)

pytestmark = pytest.mark.rehearse

STACK = "gb300-disagg-sglang"


def test_an_sglang_stack_rehearses_to_a_load_report(tmp_path):
    out = tmp_path / STACK
    args = ("--requests", "8", "--duration", "60", "--concurrency", "2", "--system-prompt-tokens", "2048")
    result = rehearse(out, STACK, *args, "--turns", "4", "--runs", "agentic", timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["failure"] is None and 0 < report["ready_seconds"] < 240
    assert report["smoke"]["passed"] and len(report["smoke"]["checks"]) == 5, report["smoke_failures"]
    # the mocker simulated SGLang's scheduler on every role
    assert all(
        r["mocker_args"][r["mocker_args"].index("--engine-type") + 1] == "sglang" for r in report["roles"].values()
    )
    load = report["load"]
    assert load["requests"] == 8 and load["output_tokens_per_second"] > 0
    assert 0 < load["ttft_ms"]["p50"] <= load["ttft_ms"]["p99"] and 0 < load["itl_ms"]["p50"]
    # the agentic run shares a 2048-token system prompt: the router finds it cached on the prefill worker
    assert 0 < report["kv_hit_rate"] <= 1 and "KV router" in report["kv_hit_rate_source"]
    assert report["prefill_decode_requests"]["prefill"] > 0 and report["prefill_decode_requests"]["decode"] > 0
    assert "KV router" in (out / "report.md").read_text()
    assert_nothing_left(out)
