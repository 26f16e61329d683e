"""Issue 22: an SGLang stack rehearses like the four: ready, every smoke check passed, the load run and its report,
over the mocker's SGLang scheduler (`--engine-type sglang`). Its prefix reuse is read at the KV router (the mocker's
SGLang engine reports no cached tokens in usage: tests/unit/test_sglang_cache_evidence.py), so before that this
stack failed `repeated_prompt_cached` (cached_tokens=0) and never reached the load.

One stack runs (the disaggregated GB300 one: both roles, DCP on decode), bounded: 8 requests, 60 s cap, one run;
the four SGLang stacks' mocker argv go through the installed parser.
Marked `rehearse` (deselected in `make test`); `make test-rehearse` runs it."""

from __future__ import annotations

import json
import subprocess

import pytest
from test_rehearse_live import PYTHON, assert_nothing_left, rehearsal_venv, rehearse  # noqa: F401 (venv check, autouse)

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


def test_every_sglang_mocker_argv_simulates_sglang_in_the_installed_parser(tmp_path):
    """The four SGLang stacks' mocker argv, parsed by dynamo.mocker 1.6.1's own parser: SGLang's scheduler at the
    router's block (page x DCP) with prefix caching on, so the router's cached-prefix counter can see a reuse."""
    from kimi_k3.blueprint import Blueprint
    from kimi_k3.graph import role_plans
    from kimi_k3.rehearsal import plan as rehearsal

    argvs = []
    for stack in ("gb200-sglang", "gb300-sglang", "gb200-disagg-sglang", "gb300-disagg-sglang"):
        graph = Blueprint.for_stack(stack).graph
        plan = rehearsal.plan_rehearsal(
            graph, role_plans.role_kv_plans(graph), http_port=1, metrics_ports=range(2, 99), model_path=str(tmp_path)
        )
        assert plan.cache_evidence == "router"
        argvs += [(list(r.args), role.block_size) for r, role in zip(plan.roles, graph.roles)]
    script = (
        "import json, sys\nfrom dynamo.mocker.args import parse_args\n"
        "for argv, block in json.load(sys.stdin):\n"
        "    a = parse_args(argv)\n"
        "    assert a.engine_type == 'sglang' and a.block_size == block and a.enable_prefix_caching, argv\n"
    )
    done = subprocess.run(
        [str(PYTHON), "-c", script], input=json.dumps(argvs), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
