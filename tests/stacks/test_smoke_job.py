"""The in-cluster smoke test Job (under Pulumi's mocks): the same script as `kimi-k3 rehearse`, created only after
the graph is Ready, awaited by the provider so that its failure fails `pulumi up`; `serving.smokeTest: false`
removes it."""

from __future__ import annotations

import pytest
from conftest import ROOT, STACKS, render_with

from kimi_k3.k8s.smoke_job import smoke_job
from kimi_k3.pods import smoke


def _by_name(r, kind: str, name: str):
    (res,) = [x for x in r.resources if x["type"].endswith(f":{kind}") and x["name"].endswith(name)]
    return res


def _arg(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("stack", STACKS)
def test_smoke_job_runs_the_shared_script_after_the_graph_is_ready(stack, rendered):
    r = rendered[stack]
    job = _by_name(r, "Job", "-smoke-test")
    script = _by_name(r, "ConfigMap", "-smoke-script")
    dgd = next(x for x in r.resources if x["type"].endswith(":DynamoGraphDeployment"))
    # ordered after the graph-ready Job, which holds `pulumi up` until the operator reports the graph Ready (the
    # graph itself is not awaited: tests/unit/test_graph_watch.py)
    ready = _by_name(r, "Job", "-serving-ready")
    assert ready["urn"] in job["dependsOn"] and script["urn"] in job["dependsOn"]
    assert dgd["urn"] in ready["dependsOn"]
    assert job["parent"] == dgd["parent"]
    # one implementation: the ConfigMap carries kimi_k3/pods/smoke.py byte for byte
    assert script["inputs"]["data"] == {"smoke.py": (ROOT / "kimi_k3" / "pods" / "smoke.py").read_text()}
    spec = job["inputs"]["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    args = container["args"]
    assert container["command"] == ["python3", "/smoke/smoke.py"]
    assert _arg(args, "--url") == f"http://{r.outputs['frontendService']}"
    assert _arg(args, "--served-model-name") == "moonshotai/Kimi-K3"
    assert _arg(args, "--max-model-len") == "1048576"
    assert "--real-model" in args, "reasoning, tool call and image input need the real model"
    assert spec["template"]["spec"]["volumes"] == [
        {"name": "smoke", "configMap": {"name": script["inputs"]["metadata"]["name"]}}
    ]
    assert spec["template"]["spec"]["nodeSelector"] == {"kimi-k3.io/node-role": "system"}


@pytest.mark.parametrize("stack", STACKS)
def test_smoke_job_failure_fails_pulumi_up(stack, rendered):
    """The provider awaits a typed batch/v1 Job until Complete and fails the update when it reports Failed
    (pulumi_kubernetes.batch.v1.Job docs); nothing here opts out of that await or waits on something else."""
    job = _by_name(rendered[stack], "Job", "-smoke-test")
    assert job["type"] == "kubernetes:batch/v1:Job"
    ann = job["inputs"]["metadata"].get("annotations", {})
    assert "pulumi.com/skipAwait" not in ann and "pulumi.com/waitFor" not in ann
    spec = job["inputs"]["spec"]
    assert spec["backoffLimit"] <= 1
    # the Job gives up before `pulumi up` stops waiting for it, so up reports the Job's failure, not a timeout
    assert spec["activeDeadlineSeconds"] < int(ann["pulumi.com/timeoutSeconds"])
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    (container,) = spec["template"]["spec"]["containers"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "--termination-log" in container["args"]


def test_smoke_job_reruns_when_the_graph_changes():
    from conftest import stack_config

    from kimi_k3.config.stack import parse_stack_config
    from kimi_k3.graph.build import build_graph

    def job_hash(**overrides):
        config, secrets = stack_config("gb300-disagg", **overrides)
        job = smoke_job(build_graph("gb300-disagg", parse_stack_config(config, secrets)), "python:3")
        return job["spec"]["template"]["metadata"]["annotations"]["kimi-k3.io/graph-sha256"]

    assert job_hash() != job_hash(serving={"pdRatio": "1:3"})
    assert job_hash() == job_hash()


def test_smoke_test_can_be_turned_off():
    r = render_with("gb300", serving={"smokeTest": False})
    assert not [x for x in r.resources if x["name"].endswith(("-smoke-test", "-smoke-script"))]


def test_failed_check_is_named_in_the_termination_message(tmp_path):
    term = tmp_path / "termination-log"
    assert (
        smoke.main(
            [
                "--url",
                "http://127.0.0.1:9",
                "--served-model-name",
                "m",
                "--max-model-len",
                "8",
                "--termination-log",
                str(term),
            ]
        )
        == 1
    )
    text = term.read_text()
    assert text.startswith("smoke test FAILED: models_lists_served_name:")
    assert all(name in text for name in smoke.CHECKS)


def test_manifest_builder_and_script_agree_on_flags():
    from kimi_k3.blueprint import load_stack

    _, graph = load_stack("gb200", ROOT)
    args = smoke_job(graph, "python:3.12.11-slim-bookworm")["spec"]["template"]["spec"]["containers"][0]["args"]
    parsed = [a for a in args if a.startswith("--")]
    # every flag the Job passes is one smoke.main accepts (argparse would exit 2 in the pod otherwise)
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()) as help_text:
        with pytest.raises(SystemExit):
            smoke.main(["--help"])
    for flag in parsed:
        assert flag in help_text.getvalue()
