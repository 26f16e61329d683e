"""The optional in-cluster AIPerf benchmark Job (`kimi-k3:serving.benchmark`, under Pulumi's mocks): off by default,
ordered after the smoke test, running exactly the workload `kimi-k3 rehearse` runs locally (kimi_k3/pods/workload.py),
bounded, with secure defaults; bad settings refused with one clear error; and its runner's behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, STACKS, assert_one_clear_error, flag, render_with, stack_config

from kimi_k3 import names as kimi_k3_names
from kimi_k3.commands import rehearse
from kimi_k3.config.serving import BENCHMARK_IMAGE
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.graph.build import build_graph
from kimi_k3.graph.role_plans import role_kv_plans
from kimi_k3.k8s import benchmark_job, smoke_job
from kimi_k3.pods import workload
from kimi_k3.rehearsal import load
from kimi_k3.rehearsal.plan import plan_rehearsal

ON = {"enabled": True}


def _named(r, kind: str, suffix: str):
    return [x for x in r.resources if x["type"].endswith(f":{kind}") and x["name"].endswith(suffix)]


def _plan(r) -> dict:
    (cm,) = _named(r, "ConfigMap", "-benchmark-plan")
    return json.loads(cm["inputs"]["data"]["plan.json"])


@pytest.fixture(scope="module")
def enabled():
    return {stack: render_with(stack, serving={"benchmark": ON}) for stack in STACKS}


@pytest.mark.parametrize("stack", STACKS)
def test_off_by_default_and_rendered_when_on(stack, rendered, enabled):
    assert not [x for x in rendered[stack].resources if "benchmark" in x["name"]]
    assert len(_named(enabled[stack], "Job", "-benchmark")) == 1
    assert len(_named(enabled[stack], "ConfigMap", "-benchmark-plan")) == 1
    # turning it on adds exactly these two objects and changes nothing else
    before = {x["urn"]: x["inputs"] for x in rendered[stack].resources}
    after = {x["urn"]: x["inputs"] for x in enabled[stack].resources if "benchmark" not in x["name"]}
    assert before == after


@pytest.mark.parametrize("stack", STACKS)
def test_ordered_after_the_smoke_test_which_follows_the_graph(stack, enabled):
    r = enabled[stack]
    (job,) = _named(r, "Job", "-benchmark")
    (smoke,) = _named(r, "Job", "-smoke-test")
    (ready,) = _named(r, "Job", "-serving-ready")
    (plan,) = _named(r, "ConfigMap", "-benchmark-plan")
    dgd = next(x for x in r.resources if x["type"].endswith(":DynamoGraphDeployment"))
    assert smoke["urn"] in job["dependsOn"] and plan["urn"] in job["dependsOn"]
    assert ready["urn"] in smoke["dependsOn"] and dgd["urn"] in ready["dependsOn"]
    assert job["parent"] == dgd["parent"]


def test_without_the_smoke_test_it_follows_the_graph_ready_job():
    r = render_with("gb300", serving={"benchmark": ON, "smokeTest": False})
    (job,) = _named(r, "Job", "-benchmark")
    (ready,) = _named(r, "Job", "-serving-ready")
    assert not _named(r, "Job", "-smoke-test")
    assert ready["urn"] in job["dependsOn"]


def _local_argv(stack: str, cfg, graph, kind: str, cli: list[str]) -> list[str]:
    """The argv `kimi-k3 rehearse STACK [cli]` gives AIPerf for run `kind` (its own functions, no processes)."""
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    args = rehearse.RehearseOptions.from_values(rehearse.register(sub).parse_args([stack, *cli]))
    w = load.resolve_workload(cfg, args)
    plan = plan_rehearsal(
        graph, role_kv_plans(graph), http_port=18000, metrics_ports=range(21000, 21100), model_path="/fixture"
    )
    return load.aiperf_argv(Path("/venv/python"), plan, kind, w, Path("/fixture"), Path("/out") / kind)


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {
            "requests": 8,
            "durationSeconds": 30,
            "concurrency": 2,
            "turns": 2,
            "systemPromptTokens": 1024,
            "runs": ["synthetic", "agentic"],
        },
    ],
)
def test_job_runs_the_rehearsals_workload(stack, overrides):
    """Same flags and values as the local rehearsal's AIPerf runs, in the same order, for the stack's configured
    workload; only where AIPerf runs differs (frontend URL, tokenizer, artifact directory)."""
    config, secrets = stack_config(stack, serving={"benchmark": {**ON, **overrides}})
    cfg = parse_stack_config(config, secrets)
    graph = build_graph(stack, cfg)
    plan = benchmark_job.benchmark_plan(graph, cfg.serving.benchmark.to_workload())
    assert list(plan["runs"]) == overrides.get("runs", ["agentic", "synthetic"])
    for kind, job_args in plan["runs"].items():
        local = _local_argv(stack, cfg, graph, kind, [])
        assert local[1:3] == ["-m", "aiperf"]
        assert workload.without_place(job_args, ["--tokenizer-trust-remote-code"]) == workload.without_place(local[3:])
        assert flag(job_args, "--request-count") == str(overrides.get("requests", 32))
        # where it runs: the frontend Service, the model's own tokenizer from the cache, a results directory
        assert flag(job_args, "--url") == smoke_job.frontend_url(graph)
        assert flag(job_args, "--model") == graph.served_model_name == flag(local, "--model")
        assert flag(job_args, "--tokenizer") == graph.model_path
        assert flag(job_args, "--artifact-dir") == f"/results/{kind}"


def test_rehearse_flags_override_the_stacks_workload():
    config, secrets = stack_config("gb300", serving={"benchmark": {"requests": 8}})
    cfg = parse_stack_config(config, secrets)
    graph = build_graph("gb300", cfg)
    argv = _local_argv("gb300", cfg, graph, "synthetic", [])
    assert flag(argv, "--request-count") == "8"
    argv = _local_argv("gb300", cfg, graph, "synthetic", ["--requests", "5", "--duration", "20"])
    assert (flag(argv, "--request-count"), flag(argv, "--benchmark-duration")) == ("5", "20")


@pytest.mark.parametrize("stack", STACKS)
def test_bounded_secure_and_readable_afterwards(stack, enabled):
    r = enabled[stack]
    (job,) = _named(r, "Job", "-benchmark")
    spec, ann = job["inputs"]["spec"], job["inputs"]["metadata"]["annotations"]
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    plan = _plan(r)
    w = workload.DEFAULT
    # bounded: each run by requests and duration; the Job by the runs' deadlines, before `pulumi up` stops waiting
    assert plan["run_deadline_seconds"] == w.duration_seconds + workload.RUN_GRACE_SECONDS
    assert spec["activeDeadlineSeconds"] == benchmark_job.BENCHMARK_START_SECONDS + 2 * plan["run_deadline_seconds"]
    assert spec["activeDeadlineSeconds"] < int(ann["pulumi.com/timeoutSeconds"])
    assert spec["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert job["type"] == "kubernetes:batch/v1:Job" and "pulumi.com/skipAwait" not in ann
    # secure: no API credentials, non-root, nothing writable but scratch, the weights read-only
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not pod.get("hostNetwork") and not any("valueFrom" in e for e in c.get("env", []))
    cache = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert cache["persistentVolumeClaim"] == {"claimName": kimi_k3_names.NAMES["pvc"], "readOnly": True}
    assert all(m.get("readOnly") for m in c["volumeMounts"] if m["name"] in (cache["name"], "benchmark"))
    assert all("emptyDir" in v for v in pod["volumes"] if v["name"] in ("tmp", "results"))
    # Guaranteed QoS: limits on everything requested, equal for CPU and memory
    res = c["resources"]
    assert res["limits"]["cpu"] == res["requests"]["cpu"] and res["limits"]["memory"] == res["requests"]["memory"]
    # readable afterwards: the runner logs each run's summary; the termination message says which run failed
    assert c["command"] == ["python", "/benchmark/workload.py"]
    assert c["args"] == ["--plan", "/benchmark/plan.json", "--termination-log", "/dev/termination-log"]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "ttlSecondsAfterFinished" not in spec, "the Job (and its pod's log) stays until the next change"
    assert c["image"] == BENCHMARK_IMAGE


@pytest.mark.parametrize("stack", STACKS)
def test_the_job_carries_the_workload_module_byte_for_byte(stack, enabled):
    (cm,) = _named(enabled[stack], "ConfigMap", "-benchmark-plan")
    assert cm["inputs"]["data"]["workload.py"] == (ROOT / "kimi_k3" / "pods" / "workload.py").read_text()
    (job,) = _named(enabled[stack], "Job", "-benchmark")
    vol = next(v for v in job["inputs"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "benchmark")
    assert vol["configMap"]["name"] == cm["inputs"]["metadata"]["name"]
    # the plan the runner reads is the one the tests above compare with the rehearsal's argv
    config, secrets = stack_config(stack, serving={"benchmark": ON})
    graph = build_graph(stack, parse_stack_config(config, secrets))
    assert _plan(enabled[stack]) == json.loads(json.dumps(benchmark_job.benchmark_plan(graph, workload.DEFAULT)))


def test_default_image_is_the_rehearsals_aiperf_version():
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements-rehearse.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert BENCHMARK_IMAGE == f"nvcr.io/nvidia/aiperf:{pins['aiperf']}"


def test_job_reruns_when_the_graph_or_the_workload_changes():
    def template_annotations(**bench):
        config, secrets = stack_config("gb300-disagg", serving={"benchmark": {**ON, **bench}})
        cfg = parse_stack_config(config, secrets)
        g = build_graph("gb300-disagg", cfg)
        job = benchmark_job.benchmark_job(g, cfg.serving.benchmark.to_workload(), BENCHMARK_IMAGE)
        return job["spec"]["template"]["metadata"]["annotations"]

    assert template_annotations() == template_annotations()
    assert template_annotations() != template_annotations(requests=64)


BAD = {
    "latest image": (
        {"image": "nvcr.io/nvidia/aiperf:latest"},
        ["kimi-k3:serving.benchmark.image", "latest tag", "allowed: a version tag or a digest"],
    ),
    "untagged image": ({"image": "nvcr.io/nvidia/aiperf"}, ["kimi-k3:serving.benchmark.image", "untagged"]),
    "no requests": ({"requests": 0}, ["kimi-k3:serving.benchmark.requests = 0", "greater than or equal to 1"]),
    "unbounded requests": ({"requests": 1000000}, ["kimi-k3:serving.benchmark.requests = 1000000", "10000"]),
    "no time": ({"durationSeconds": 0}, ["kimi-k3:serving.benchmark.durationSeconds = 0", "greater than 0"]),
    "over an hour": ({"durationSeconds": 7200}, ["kimi-k3:serving.benchmark.durationSeconds = 7200", "3600"]),
    "unknown run": ({"runs": ["soak"]}, ["kimi-k3:serving.benchmark.runs.0", "soak", "allowed: agentic or synthetic"]),
    "no runs": ({"runs": []}, ["kimi-k3:serving.benchmark.runs = []", "at least 1"]),
    "a run twice": ({"runs": ["agentic", "agentic"]}, ["kimi-k3:serving.benchmark.runs", "at most once"]),
    "enabled not a bool": ({"enabled": "sometimes"}, ["kimi-k3:serving.benchmark.enabled", "sometimes"]),
    "typo": (
        {"requestCount": 8},
        ["kimi-k3:serving.benchmark.requestCount", "unknown key", "allowed keys:", "requests"],
    ),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_settings_are_refused(name):
    bench, expected = BAD[name]
    assert_one_clear_error("gb300", {"serving": {"benchmark": {**ON, **bench}}}, expected)


# ------------------------------------------------------------------------------------------------- the runner

FAKE_AIPERF = """
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--artifact-dir") + 1]
if os.environ.get("FAKE_AIPERF_FAIL") and os.environ["FAKE_AIPERF_FAIL"] in out:
    sys.exit(3)
os.makedirs(out, exist_ok=True)
n = int(args[args.index("--request-count") + 1])
with open(os.path.join(out, "profile_export_aiperf.json"), "w") as f:
    json.dump({"request_count": {"avg": n}, "time_to_first_token": {"p50": 120.0, "p90": 150.0, "p99": 190.0},
               "inter_token_latency": {"p50": 6.0, "p90": 7.0, "p99": 8.0}, "output_token_throughput": {"avg": 450.0}}, f)
"""


def _run_runner(tmp_path: Path, fail: str = "") -> tuple[int, str, str]:
    fake = tmp_path / "fake" / "aiperf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_AIPERF)
    w = workload.Workload(requests=3)
    plan = {
        "run_deadline_seconds": 60,
        "runs": {
            k: workload.profile_args(
                k, w, model="m", url="http://127.0.0.1:9", tokenizer="t", artifact_dir=str(tmp_path / "results" / k)
            )
            for k in w.runs
        },
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    term = tmp_path / "termination-log"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "FAKE_AIPERF_FAIL": fail}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "kimi_k3" / "pods" / "workload.py"),
            "--plan",
            str(tmp_path / "plan.json"),
            "--termination-log",
            str(term),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout, term.read_text() if term.exists() else ""


def test_runner_logs_each_runs_summary(tmp_path):
    code, out, term = _run_runner(tmp_path)
    assert code == 0, out
    lines = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("kimi-k3-benchmark ")]
    assert [x["run"] for x in lines] == ["agentic", "synthetic"]
    assert lines[0]["requests"] == 3 and lines[0]["ttft_ms"] == {"p50": 120.0, "p90": 150.0, "p99": 190.0}
    assert term.startswith("benchmark done: agentic: 3 requests")


def test_runner_names_the_failed_run(tmp_path):
    code, out, term = _run_runner(tmp_path, fail="synthetic")
    assert code == 1
    assert (
        term == "benchmark FAILED: synthetic: aiperf exited with code 3, no "
        f"{tmp_path / 'results' / 'synthetic' / workload.RESULT_FILE}"
    )
    assert '"run": "agentic"' in out  # the run that completed is still reported


def test_runner_refuses_a_bad_plan(tmp_path):
    (tmp_path / "plan.json").write_text("{}")
    assert workload.main(["--plan", str(tmp_path / "plan.json")]) == 2
    assert workload.main(["--plan", str(tmp_path / "missing.json")]) == 2


def test_workload_module_needs_only_the_standard_library():
    """The Job runs it in AIPerf's image, which has no kimi_k3: every import must be the standard library's."""
    import ast

    tree = ast.parse((ROOT / "kimi_k3" / "pods" / "workload.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]
