"""Issue 22: where a repeated prompt's prefix reuse shows, per engine, and the smoke check that reads it there.

Dynamo 1.6.1's mocker (aisimulate-core 0.13.0) simulates SGLang's radix cache and publishes its KV events, but its
SGLang scheduler reports no cached tokens in usage (scheduler/sglang/decode.rs: every output `cached_tokens: None`);
its vLLM scheduler does (scheduler/vllm/core.rs take_cached_tokens_for_signal). Measured on gb200-sglang: usage
cached_tokens 0 on 23 repeats, the KV router's cached-prefix counter 102,400 tokens. So an SGLang rehearsal checks
the router's counter, a vLLM one keeps the usage check; a fake frontend here plays each engine."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import STACKS, V15_STACKS

from kimi_k3.blueprint import Blueprint
from kimi_k3.graph import role_plans
from kimi_k3.pods import smoke
from kimi_k3.rehearsal import metrics, report
from kimi_k3.rehearsal import plan as rehearsal

SGLANG_STACKS = ("gb200-sglang", "gb300-sglang", "gb200-disagg-sglang", "gb300-disagg-sglang")
BLOCK = 64


def _plan(stack: str) -> rehearsal.Rehearsal:
    graph = Blueprint.for_stack(stack).graph
    n = sum(r.replicas for r in graph.roles)
    return rehearsal.plan_rehearsal(
        graph, role_plans.role_kv_plans(graph), http_port=1, metrics_ports=range(2, 2 + n), model_path="/m"
    )


@pytest.mark.parametrize("stack", STACKS + V15_STACKS + SGLANG_STACKS)
def test_sglang_rehearsals_check_the_router_and_vllm_ones_keep_usage(stack):
    plan = _plan(stack)
    want = "router" if stack in SGLANG_STACKS else "usage"
    assert plan.cache_evidence == want
    assert plan.smoke_options == {"kv_block_size": plan.smoke_block_size, "cache_evidence": want}
    source = report.build_report(plan, ready_seconds=1.0, registered={}, smoke={}, runs={}, kv_hit=None, worker_load={})
    assert ("KV router" in source["kv_hit_rate_source"]) == (stack in SGLANG_STACKS)
    assert source["kv_hit_rate_source"] in report.render_markdown(source)


class FakeFrontend:
    """/v1/chat/completions with usage cached_tokens `usage_cached` on every repeat; /metrics with the router's
    cached-prefix counter growing by `router_growth` per repeat (a decoy series of a longer name grows more)."""

    def __init__(self, usage_cached: int, router_growth: int):
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, body: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                repeats = max(outer.requests - 1, 0)
                name = smoke.ROUTER_CACHED_TOTAL
                text = (
                    f"# HELP {name} Raw cached prefix tokens on the selected worker and DP rank\n# TYPE {name} counter\n"
                    f'{name}{{phase="prefill",worker_id="a"}} {repeats * router_growth}\n'
                    f'{name}{{phase="decode",worker_id="b"}} 0\n'
                    f'{name}_decoy{{phase="prefill"}} {repeats * 10 * BLOCK}\n'
                )
                self._send(text.encode(), "text/plain")

            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                cached = usage_cached if outer.requests else 0
                outer.requests += 1
                usage = {
                    "prompt_tokens": 4 * BLOCK,
                    "completion_tokens": 4,
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
                self._send(
                    json.dumps({"choices": [{"message": {"content": "x"}}], "usage": usage}).encode(),
                    "application/json",
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        self.client = smoke.Client(f"http://127.0.0.1:{self.server.server_address[1]}", 10)

    def check(self, evidence: str):
        return smoke.check_prefix_cache(self.client, "m", 100_000, kv_block_size=BLOCK, cache_evidence=evidence)


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch):
    monkeypatch.setattr(smoke, "PREFIX_CACHE_SECONDS", 0)
    monkeypatch.setattr(smoke.time, "sleep", lambda s: None)


@pytest.mark.parametrize(
    "usage_cached, router_growth, evidence, passes",
    [
        (0, 3 * BLOCK, "router", True),  # the mocker's SGLang: caches, publishes KV events, reports no cached tokens
        (0, 3 * BLOCK, "usage", False),  # ... which the usage check (the old form for SGLang) can never see
        (3 * BLOCK, 3 * BLOCK, "usage", True),  # vLLM (and real SGLang under dynamo.sglang): usage says it
        (3 * BLOCK, 0, "router", False),  # the router mode trusts no usage claim: no KV event, no pass
        (0, BLOCK - 1, "router", False),  # less than one whole block found cached
    ],
)
def test_prefix_reuse_is_read_where_the_engine_shows_it(usage_cached, router_growth, evidence, passes):
    fake = FakeFrontend(usage_cached, router_growth)
    try:
        why = fake.check(evidence)
    finally:
        fake.server.shutdown()
    assert (why is None) == passes, why
    if not passes:
        where = "the KV router found cached" if evidence == "router" else "reported cached_tokens"
        assert where in why and f"want >= {BLOCK}" in why


def test_unknown_evidence_is_named_with_what_is_allowed():
    why = smoke.check_prefix_cache(
        smoke.Client("http://127.0.0.1:9", 1), "m", 10, kv_block_size=BLOCK, cache_evidence="x"
    )
    assert why == "cache evidence 'x': allowed: usage, router"


def test_kv_hit_rate_reads_the_counter_of_its_evidence():
    samples = [
        ("dynamo_frontend_input_sequence_tokens_sum", {}, 1000.0),
        ("dynamo_frontend_cached_tokens_sum", {}, 0.0),
        (smoke.ROUTER_CACHED_TOTAL, {"phase": "prefill"}, 600.0),
    ]
    assert metrics.kv_hit_rate(samples) == 0.0
    assert metrics.kv_hit_rate(samples, "router") == 0.6
