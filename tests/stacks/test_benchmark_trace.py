"""The in-cluster benchmark Job replays a user's trace (`kimi-k3:serving.benchmark.trace`, issue 21), under Pulumi's
mocks: the same AIPerf argv as `kimi-k3 rehearse --trace` (one builder), the user's ConfigMap mounted by name (the
trace never enters the Pulumi state), the same selection as the rehearsal's, `up` gated as for the built-in runs, and
a trace that cannot fit refused with one clear error at render, by `kimi-k3 trace-configmap`, or by the Job at start."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, assert_one_clear_error, flag, render_with, stack_config

from kimi_k3.commands import main as cli
from kimi_k3.commands import rehearse
from kimi_k3.config.serving import BENCHMARK_IMAGE
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.trace import CONFIGMAP_MAX_BYTES
from kimi_k3.graph.build import build_graph
from kimi_k3.graph.role_plans import role_kv_plans
from kimi_k3.k8s import benchmark_job, benchmark_trace, smoke_job
from kimi_k3.pods import workload
from kimi_k3.rehearsal import load
from kimi_k3.rehearsal.plan import plan_rehearsal
from kimi_k3.sizing import trace_cache

TRACE = {"configMap": "team-trace", "key": "agent.jsonl", "first": 200, "window": "60:600", "speedup": 4}
ON = {"enabled": True, "trace": TRACE}
STACK = "gb300-disagg"


def _named(r, kind: str, suffix: str):
    return [x for x in r.resources if x["type"].endswith(f":{kind}") and x["name"].endswith(suffix)]


@pytest.fixture(scope="module")
def with_trace():
    return render_with(STACK, serving={"benchmark": ON})


def _graph(bench: dict):
    config, secrets = stack_config(STACK, serving={"benchmark": bench})
    cfg = parse_stack_config(config, secrets)
    return cfg, build_graph(STACK, cfg)


def test_job_replays_with_the_rehearsals_argv(with_trace):
    """The Job's AIPerf argv is the rehearsal's `--trace` argv for the same options, place flags aside."""
    (cm,) = _named(with_trace, "ConfigMap", "-benchmark-plan")
    plan = json.loads(cm["inputs"]["data"]["plan.json"])
    assert list(plan["runs"]) == ["trace"]
    job_args = plan["runs"]["trace"]
    cfg, graph = _graph(ON)
    sub = argparse.ArgumentParser().add_subparsers()
    args = rehearse.register(sub).parse_args([STACK, "--trace", "x.jsonl", "--trace-speedup", "4"])
    rplan = plan_rehearsal(
        graph, role_kv_plans(graph), http_port=18000, metrics_ports=range(21000, 21100), model_path="/fixture"
    )
    local = load.trace_argv(Path("/venv/python"), rplan, Path("/out/trace.jsonl"), args.trace_speedup, "t", Path("/o"))
    assert local[1:3] == ["-m", "aiperf"]
    strip = ["--tokenizer-trust-remote-code"]
    job_no_input = workload.without_place(job_args, strip)
    local_no_input = workload.without_place(local[3:])
    i = job_no_input.index("--input-file")
    assert job_no_input[:i] + job_no_input[i + 2 :] == local_no_input[:i] + local_no_input[i + 2 :]
    assert flag(job_args, "--custom-dataset-type") == "mooncake_trace" and flag(job_args, "--fixed-schedule")
    assert flag(job_args, "--synthesis-speedup-ratio") == "4"
    # it replays the selection the runner writes from the mounted ConfigMap, against the frontend Service
    assert flag(job_args, "--input-file") == benchmark_trace.SELECTED == plan["trace"]["selected"]
    assert flag(job_args, "--url") == smoke_job.frontend_url(graph)
    assert plan["trace"]["first"] == 200 and plan["trace"]["window"] == [60.0, 600.0]
    assert plan["trace"]["source"] == "kimi-k3:serving.benchmark.trace: ConfigMap kimi-k3/team-trace key agent.jsonl"


def test_the_users_configmap_is_mounted_by_name_and_never_registered(with_trace):
    (job,) = _named(with_trace, "Job", "-benchmark")
    pod = job["inputs"]["spec"]["template"]["spec"]
    vol = next(v for v in pod["volumes"] if v["name"] == benchmark_trace.TRACE_VOLUME)
    assert vol["configMap"] == {
        "name": "team-trace",
        "items": [{"key": "agent.jsonl", "path": benchmark_trace.TRACE_FILE}],
        "optional": True,
    }
    (c,) = pod["containers"]
    m = next(m for m in c["volumeMounts"] if m["name"] == benchmark_trace.TRACE_VOLUME)
    assert m == {"name": "trace", "mountPath": "/trace", "readOnly": True}
    assert not [x for x in with_trace.resources if x["name"].endswith("team-trace")]
    assert not [x for x in with_trace.resources if (x["inputs"].get("metadata") or {}).get("name") == "team-trace"]


def test_it_gates_up_as_the_benchmark_does(with_trace):
    (job,) = _named(with_trace, "Job", "-benchmark")
    (smoke,) = _named(with_trace, "Job", "-smoke-test")
    (plan_cm,) = _named(with_trace, "ConfigMap", "-benchmark-plan")
    assert smoke["urn"] in job["dependsOn"] and plan_cm["urn"] in job["dependsOn"]
    spec, ann = job["inputs"]["spec"], job["inputs"]["metadata"]["annotations"]
    plan = json.loads(plan_cm["inputs"]["data"]["plan.json"])
    # bounded by the trace's maxSeconds (default 1800) plus the run grace; `pulumi up` waits past it, then fails
    assert plan["run_deadline_seconds"] == 1800 + workload.RUN_GRACE_SECONDS
    assert spec["activeDeadlineSeconds"] == benchmark_job.BENCHMARK_START_SECONDS + plan["run_deadline_seconds"]
    assert spec["activeDeadlineSeconds"] < int(ann["pulumi.com/timeoutSeconds"])
    assert job["type"] == "kubernetes:batch/v1:Job" and "pulumi.com/skipAwait" not in ann
    assert spec["backoffLimit"] == 0


def test_changed_trace_options_rerun_the_job():
    def annotations(**trace):
        cfg, g = _graph({**ON, "trace": {**TRACE, **trace}})
        job = benchmark_job.benchmark_job(
            g, cfg.serving.benchmark.to_workload(), BENCHMARK_IMAGE, None, cfg.serving.benchmark.trace
        )
        return job["spec"]["template"]["metadata"]["annotations"]

    assert annotations() == annotations()
    assert annotations() != annotations(configMap="team-trace-2")
    assert annotations() != annotations(first=100)


BAD = {
    "too large for a ConfigMap": (
        {"sizeBytes": CONFIGMAP_MAX_BYTES + 1},
        ["kimi-k3:serving.benchmark.trace.sizeBytes = 1048577", "do not fit in a ConfigMap", "1,048,576"],
    ),
    "bad window": ({"window": "600:60"}, ["kimi-k3:serving.benchmark.trace.window", "600:60", "allowed: START:END"]),
    "no ConfigMap": ({"configMap": None}, ["kimi-k3:serving.benchmark.trace.configMap", "required"]),
    "bad name": ({"configMap": "Team_Trace"}, ["kimi-k3:serving.benchmark.trace.configMap", "Team_Trace"]),
    "zero speedup": ({"speedup": 0}, ["kimi-k3:serving.benchmark.trace.speedup = 0", "0.01"]),
    "over an hour": ({"maxSeconds": 7200}, ["kimi-k3:serving.benchmark.trace.maxSeconds = 7200", "3600"]),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_trace_settings_are_refused(name):
    bad, expected = BAD[name]
    trace = {k: v for k, v in {**TRACE, **bad}.items() if v is not None}
    assert_one_clear_error(STACK, {"serving": {"benchmark": {"enabled": True, "trace": trace}}}, expected)


# ------------------------------------------------------------------ the selection: the rehearsal's, on real traffic


def test_runner_selects_as_the_rehearsal_does_on_the_mooncake_trace(shared_reference):
    path = shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl"
    text = path.read_text()
    for first, window in ((200, None), (None, (600.0, 660.0)), (50, (1200.0, 3600.0))):
        want, _ = trace_cache.select(text.split("\n"), "t", first=first, window=window, limit=20000)
        got, seconds = workload.select_trace(
            text, "t", first=first, window=window, max_requests=20000, max_seconds=3600, speedup=1
        )
        assert got == want and len(got) > 0
        assert seconds == pytest.approx(trace_cache.span_seconds([trace_cache.parse_line(x, "") for x in want]))


# ------------------------------------------------------------------------------ the runner, with a fake AIPerf

FAKE_AIPERF = """
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--artifact-dir") + 1]
n = len(open(args[args.index("--input-file") + 1]).read().splitlines())
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "profile_export_aiperf.json"), "w") as f:
    json.dump({"request_count": {"avg": n}, "time_to_first_token": {"p50": 1.0}, "inter_token_latency": {"p50": 2.0},
               "output_token_throughput": {"avg": 3.0}}, f)
"""


def _runner(tmp_path: Path, trace_text: str | None, **trace) -> tuple[int, str, str]:
    fake = tmp_path / "fake" / "aiperf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_AIPERF)
    cfg, graph = _graph({**ON, "trace": {**TRACE, **trace}})
    plan = benchmark_trace.trace_plan(graph, cfg.serving.benchmark.trace, "http://127.0.0.1:9", str(tmp_path / "r"))
    # the paths the pod mounts, moved under tmp_path
    plan["trace"]["mounted"] = str(tmp_path / "trace" / "trace.jsonl")
    plan["trace"]["selected"] = str(tmp_path / "tmp" / "selected.jsonl")
    args = plan["runs"]["trace"]
    args[args.index("--input-file") + 1] = plan["trace"]["selected"]
    if trace_text is not None:
        (tmp_path / "trace").mkdir()
        Path(plan["trace"]["mounted"]).write_text(trace_text)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    term = tmp_path / "term"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "kimi_k3/pods/workload.py"),
            "--plan",
            str(tmp_path / "plan.json"),
            "--termination-log",
            str(term),
        ],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "fake")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout, term.read_text() if term.exists() else ""


def _lines(n: int, step_ms: int = 1000) -> str:
    return "".join(
        json.dumps({"timestamp": i * step_ms, "input_length": 600, "output_length": 8, "hash_ids": [i, i + 1]}) + "\n"
        for i in range(n)
    )


def test_runner_replays_the_selection(tmp_path):
    code, out, term = _runner(tmp_path, _lines(900), first=200, window="60:600", speedup=4)
    assert code == 0, out
    selected = (tmp_path / "tmp" / "selected.jsonl").read_text()
    assert selected == "".join(_lines(900).splitlines(keepends=True)[60:260])
    assert term.startswith("benchmark done: trace: 200 requests")
    assert "replaying 50 s" in out  # 199 s of arrivals at speedup 4


def test_runner_names_a_missing_configmap(tmp_path):
    code, _, term = _runner(tmp_path, None)
    assert code == 1
    assert term.startswith(
        "benchmark FAILED: trace: kimi-k3:serving.benchmark.trace: ConfigMap kimi-k3/team-trace key agent.jsonl: "
        "not found"
    )


def test_runner_refuses_a_replay_longer_than_max_seconds(tmp_path):
    code, _, term = _runner(tmp_path, _lines(900), first=None, window=None, speedup=1, maxSeconds=60)
    assert code == 1
    assert "the 900 selected requests span 899 s at speedup 1; trace.maxSeconds is 60 s" in term
    assert not (tmp_path / "r").exists(), "AIPerf must not start"


def test_runner_names_a_bad_line(tmp_path):
    code, _, term = _runner(tmp_path, _lines(3) + "not json\n")
    assert code == 1 and "key agent.jsonl line 4: not a mooncake_trace request" in term


# ------------------------------------------------------------------------------ kimi-k3 trace-configmap


def test_trace_configmap_writes_the_selection(tmp_path, capsys):
    src = tmp_path / "t.jsonl"
    src.write_text(_lines(50))
    out = tmp_path / "cm.yaml"
    assert cli.main(["trace-configmap", str(src), "--name", "team-trace", "--first", "10", "--out", str(out)]) == 0
    obj = yaml.safe_load(out.read_text())
    assert obj["kind"] == "ConfigMap" and obj["metadata"] == {
        "name": "team-trace",
        "namespace": "kimi-k3",
        "labels": {"app.kubernetes.io/part-of": "kimi-k3"},
    }
    assert obj["data"]["trace.jsonl"] == "".join(_lines(50).splitlines(keepends=True)[:10])
    err = capsys.readouterr().err
    assert f"sizeBytes: {len(obj['data']['trace.jsonl'].encode())}" in err and "kubectl create -f" in err


def test_trace_configmap_refuses_what_cannot_fit(tmp_path, capsys, shared_reference):
    """The FAST'25 conversation hour is ~3 MB: it does not fit in one ConfigMap; its first 2,000 requests do."""
    path = shared_reference / "traces" / "mooncake-fast25-conversation_trace.jsonl"
    out = tmp_path / "cm.yaml"
    assert cli.main(["trace-configmap", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"trace-configmap {path}: the 12,031 selected requests are" in err
    assert "at most 1,048,576 bytes" in err and "--first N" in err
    assert not out.exists(), "nothing written"
    assert cli.main(["trace-configmap", str(path), "--first", "2000", "--out", str(out)]) == 0
    data = yaml.safe_load(out.read_text())["data"]["trace.jsonl"]
    assert len(data.splitlines()) == 2000 and len(data.encode()) <= CONFIGMAP_MAX_BYTES
