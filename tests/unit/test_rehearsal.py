"""The rehearsal's pure part: graph + planner -> local processes and flags; metrics and report (no processes).
The real processes run in tests/live/test_rehearse_live.py (`make test-rehearse`)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest
from conftest import ROOT, STACKS, flag, stack_config

from kimi_k3.blueprint import load_stack
from kimi_k3.commands.main import main
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import StackError
from kimi_k3.graph import build as graph_mod
from kimi_k3.graph import recipe, role_plans
from kimi_k3.graph.build import build_graph
from kimi_k3.pods import smoke
from kimi_k3.rehearsal import metrics
from kimi_k3.rehearsal import plan as rehearsal
from kimi_k3.rehearsal import report as rehearsal_report

STABLE_KEYS = {"stack", "ready_seconds", "workers", "smoke", "load", "kv_hit_rate"}


def plan_for(stack: str, graph=None, **kw) -> rehearsal.Rehearsal:
    if graph is None:
        _, graph = load_stack(stack, ROOT)
    return rehearsal.plan_rehearsal(
        graph,
        role_plans.role_kv_plans(graph),
        http_port=18000,
        metrics_ports=range(21000, 21100),
        model_path="/fixture",
        **kw,
    )


def graph_with(stack: str, **overrides):
    config, secrets = stack_config(stack, **overrides)
    return build_graph(stack, parse_stack_config(config, secrets))


@pytest.mark.parametrize("stack", STACKS)
def test_one_mocker_per_worker_replica_with_the_roles_serving_facts(stack):
    _, graph = load_stack(stack, ROOT)
    plan = plan_for(stack, graph)
    assert [p.name for p in plan.processes][0] == "frontend"
    assert len(plan.workers) == sum(r.replicas for r in graph.roles)
    for role in graph.roles:
        mine = [p for p in plan.workers if p.role == role.key]
        assert len(mine) == role.replicas
        vllm = list(role.args)
        for p in mine:
            args = list(p.args)
            assert p.module == "dynamo.mocker"
            assert flag(args, "--block-size") == str(graph.block_size) == flag(vllm, "--block-size")
            assert flag(args, "--max-model-len") == flag(vllm, "--max-model-len") == str(role.max_model_len)
            assert flag(args, "--max-num-seqs") == flag(vllm, "--max-num-seqs")
            assert flag(args, "--max-num-batched-tokens") == flag(vllm, "--max-num-batched-tokens")
            assert flag(args, "--disaggregation-mode") == flag(vllm, "--disaggregation-mode")
            assert flag(args, "--kv-cache-dtype") == "fp8" == role.kv_cache_dtype
            assert flag(vllm, "--enable-prefix-caching") is True and flag(args, "--enable-prefix-caching") is True
            assert flag(args, "--model-name") == graph.served_model_name
            assert (flag(args, "--discovery-backend"), flag(args, "--request-plane"), flag(args, "--event-plane")) == (
                "file",
                "tcp",
                "zmq",
            )
    # every worker its own metrics port; the frontend's is its HTTP port
    ports = [p.metrics_port for p in plan.processes]
    assert len(set(ports)) == len(ports)


@pytest.mark.parametrize("stack", STACKS)
def test_kv_capacity_is_what_kimi_k3_plan_prints(stack):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["plan", stack, "--json"]) == 0
    printed = json.loads(out.getvalue())["roles"]
    plan = plan_for(stack)
    for role in plan.roles:
        want = printed[role.key]
        assert role.capacity.tokens == want["kv_capacity_tokens"]
        assert role.capacity.bytes_per_token == round(want["kv_bytes_per_token"])
        assert role.capacity.num_blocks == want["kv_capacity_tokens"] // plan.block_size
        assert flag(list(role.args), "--num-gpu-blocks-override") == str(role.capacity.num_blocks)
        assert flag(list(role.args), "--kv-bytes-per-token") == str(role.capacity.bytes_per_token)


@pytest.mark.parametrize("stack", STACKS)
def test_frontend_takes_the_stacks_own_arguments_on_loopback(stack):
    _, graph = load_stack(stack, ROOT)
    fe = list(plan_for(stack, graph).processes[0].args)
    stack_flags = list(graph.frontend.args)
    assert flag(fe, "--router-mode") == flag(stack_flags, "--router-mode") == "kv"
    assert flag(fe, "--kv-cache-block-size") == str(graph.block_size)
    assert flag(fe, "--router-kv-events") == flag(stack_flags, "--router-kv-events")
    assert flag(fe, "--http-host") == "127.0.0.1" and flag(fe, "--http-port") == "18000"
    assert fe.count("--http-port") == 1  # the graph's in-cluster port 8000 is not passed twice


def test_replica_count_change_changes_the_rehearsal():
    base = plan_for("gb300-disagg")
    more = plan_for("gb300-disagg", graph_with("gb300-disagg", serving={"pdRatio": "2:3"}))
    count = lambda p, role: sum(1 for w in p.workers if w.role == role)  # noqa: E731
    assert (count(base, "prefill"), count(base, "decode")) == (1, 2)
    assert (count(more, "prefill"), count(more, "decode")) == (2, 3)
    assert [w.name for w in more.workers] == ["prefill-0", "prefill-1", "decode-0", "decode-1", "decode-2"]


def test_rehearsal_runs_vllms_aligned_block(monkeypatch):
    # The mocker and the frontend get the block vLLM runs Kimi K3 with (1536 at TP8 with prefix caching), not 64.
    plan = plan_for("gb300")
    assert flag(list(plan.processes[0].args), "--kv-cache-block-size") == "1536"
    for role in plan.roles:
        assert flag(list(role.args), "--block-size") == "1536"
        assert role.capacity.num_blocks == role.capacity.tokens // 1536


def test_recipe_block_size_vllm_would_raise_is_refused(monkeypatch):
    real = recipe.load_recipe
    monkeypatch.setattr(graph_mod, "load_recipe", lambda name: real(name).model_copy(update={"block_size": 64}))
    with pytest.raises(
        StackError, match=r"recipes/profiles/gb300\.yaml: blockSize = 64: .* 1536-token blocks.*allowed: 1536"
    ):
        load_stack("gb300", ROOT)


def test_mocker_args_take_a_perf_profile_and_speedup():
    args = list(plan_for("gb200", speedup_ratio=10, perf_profile="/p/profile.npz").roles[0].args)
    assert flag(args, "--speedup-ratio") == "10" and flag(args, "--planner-profile-data") == "/p/profile.npz"
    assert flag(list(plan_for("gb200").roles[0].args), "--planner-profile-data") is None


def test_every_address_the_runtime_advertises_is_loopback():
    env = rehearsal.loopback_env("/tmp/kv", (30001, 30002))
    hosts = {k: v for k, v in env.items() if k.endswith("_HOST")}
    assert set(hosts) >= {"DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_SYSTEM_HOST"}
    assert set(hosts.values()) == {"127.0.0.1"}
    # the event plane in broker mode (publishers connect, listen on nothing), to the loopback broker
    assert env["DYN_ZMQ_BROKER_URL"] == "xsub=tcp://127.0.0.1:30001 , xpub=tcp://127.0.0.1:30002"
    assert env["HF_ENDPOINT"].startswith("http://127.0.0.1:") and env["HF_HUB_OFFLINE"] == "1"
    assert env["DYN_FILE_KV"] == "/tmp/kv" and env["DYN_DISCOVERY_BACKEND"] == "file"


def test_registered_workers_from_discovery_keys():
    keys = [
        "v1/instances/dynamo/prefill/generate/1a",
        "v1/instances/dynamo/backend/generate/2b",
        "v1/instances/dynamo/backend/generate/3c",
        "v1/instances/dynamo/backend/worker_kv_query_source_9/2b",
        "v1/mdc/dynamo/backend/generate/2b",
        "v1/event_channels/namespace/dynamo/component/backend/x",
    ]
    assert metrics.registered_workers(keys) == {"prefill": 1, "backend": 2}


def test_prometheus_parsing_and_kv_hit_rate():
    text = """# HELP x
dynamo_frontend_input_sequence_tokens_sum{model="m"} 1000
dynamo_frontend_cached_tokens_sum{model="m"} 250
dynamo_component_requests_total{dynamo_endpoint="generate",dynamo_component="backend"} 7
dynamo_component_requests_total{dynamo_endpoint="clear_kv_blocks",dynamo_component="backend"} 2
"""
    samples = metrics.parse_prometheus(text)
    assert metrics.kv_hit_rate(samples) == 0.25
    assert metrics.worker_requests(samples) == 7
    assert metrics.kv_hit_rate([]) is None


def _aiperf(ttft: float) -> dict:
    return {
        "request_count": {"avg": 16.0},
        "time_to_first_token": {"p50": ttft, "p90": 2 * ttft, "p99": 3 * ttft},
        "inter_token_latency": {"p50": 5.0, "p90": 6.0, "p99": 7.0},
        "output_token_throughput": {"avg": 400.0},
    }


def test_report_has_the_stable_keys_and_says_where_token_counts_come_from():
    plan = plan_for("gb300-disagg")
    report = rehearsal_report.build_report(
        plan,
        ready_seconds=3.21,
        registered={"prefill": 1, "backend": 2},
        smoke={"passed": True, "checks": {"chat_completion": True}},
        runs={"agentic": _aiperf(100.0), "synthetic": _aiperf(50.0)},
        kv_hit=0.6,
        worker_load={"prefill-0": 10, "decode-0": 5, "decode-1": 5},
    )
    assert STABLE_KEYS <= set(report)
    assert report["workers"] == [
        {"role": "prefill", "replicas": 1, "registered": 1},
        {"role": "decode", "replicas": 2, "registered": 2},
    ]
    assert report["smoke"] == {"passed": True, "checks": {"chat_completion": True}}
    assert report["load"] == {
        "requests": 16,
        "ttft_ms": {"p50": 100.0, "p90": 200.0, "p99": 300.0},
        "itl_ms": {"p50": 5.0, "p90": 6.0, "p99": 7.0},
        "output_tokens_per_second": 400.0,
    }
    assert report["prefill_decode_requests"] == {"prefill": 10, "decode": 10}
    md = rehearsal_report.render_markdown(report, ["latency.png"])
    assert "fixture tokenizer" in md and "![latency.png](latency.png)" in md and "passed" in md.splitlines()[0]


def test_failed_rehearsal_report_names_the_failure():
    plan = plan_for("gb200")
    report = rehearsal_report.build_report(
        plan,
        ready_seconds=None,
        registered={},
        smoke={},
        runs={},
        kv_hit=None,
        worker_load={},
        failure="decode-0 exited with code 1",
    )
    assert report["smoke"]["passed"] is False and report["load"]["requests"] == 0
    assert report["workers"] == [{"role": "decode", "replicas": 1, "registered": 0}]
    assert "decode-0 exited with code 1" in rehearsal_report.render_markdown(report)


def test_smoke_checks_locally_and_what_only_the_real_model_adds():
    assert set(smoke.CHECKS) == {
        "models_lists_served_name",
        "chat_completion",
        "chat_completion_streamed",
        "repeated_prompt_cached",
        "over_context_clean_error",
    }
    assert set(smoke.REAL_MODEL_CHECKS) == {"reasoning_content", "tool_call_parsed", "image_input"}


def test_smoke_against_nothing_fails_every_check_without_a_traceback(capsys):
    # port 9 on loopback: nothing listens, every check fails cleanly and says why
    assert smoke.main(["--url", "http://127.0.0.1:9", "--served-model-name", "m", "--max-model-len", "100"]) == 1
    out = capsys.readouterr().out
    assert "smoke test FAILED" in out and "Traceback" not in out


def test_rehearse_unknown_stack_is_one_clear_error(capsys):
    assert main(["rehearse", "gb999"]) == 2
    out = capsys.readouterr().out
    assert "no stack 'gb999'" in out and "Traceback" not in out


def test_rehearse_without_its_venv_says_how_to_get_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(tmp_path / "nope" / "python"))
    assert main(["rehearse", "gb200", "--out", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out
    assert "make rehearse" in out and "Traceback" not in out
    assert not (tmp_path / "out").exists(), "bad input creates nothing"


def test_rehearse_unknown_run_is_one_clear_error(capsys, monkeypatch, tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    with pytest.raises(SystemExit) as exc:  # refused while the arguments are parsed
        main(["rehearse", "gb200", "--out", str(tmp_path / "out"), "--runs", "agentic,soak"])
    assert exc.value.code == 2 and "allowed: agentic, synthetic" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_rehearse_missing_perf_profile_is_one_clear_error(capsys, monkeypatch, tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    monkeypatch.setenv("KIMI_K3_REHEARSE_PYTHON", str(python))
    assert main(["rehearse", "gb200", "--out", str(tmp_path / "out"), "--perf-profile", str(tmp_path / "p.npz")]) == 2
    out = capsys.readouterr().out
    assert "--perf-profile" in out and "no such file" in out and "Traceback" not in out
    assert not (tmp_path / "out").exists()
