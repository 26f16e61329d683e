"""`pulumi up` reports a graph that cannot become Ready within minutes, naming the pod and the reason: the graph
is created without a Pulumi await and the graph-ready Job (kimi_k3/pods/graph_watch.py) waits, under
pulumi-kubernetes' own Job await. Pod and graph statuses below are as the kubelet and the operator write them."""

import copy
from datetime import datetime, timedelta, timezone

import pytest
from conftest import STACKS, by_kind

from kimi_k3 import names
from kimi_k3.k8s import graph_ready
from kimi_k3.offline import pulumi_await as aw
from kimi_k3.pods import graph_watch as gw
from policies import rules

NOW = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)
GRAPH = {
    "metadata": {"name": "kimi-k3-gb300"},
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "ComponentsNotReady",
                "message": "pcsg/decode: desired=1, available=0",
            }
        ]
    },
}
READY = {"metadata": {"name": "kimi-k3-gb300"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, *statuses, phase="Running", conditions=()):
    return {
        "metadata": {"name": name},
        "status": {"phase": phase, "containerStatuses": list(statuses), "conditions": list(conditions)},
    }


def running(name="main"):
    return {"name": name, "ready": False, "restartCount": 0, "state": {"running": {}}}


def crashing(restarts, message="error: path \\/model-cache/moonshotai/Kimi-K3 not found"):
    return {
        "name": "main",
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
        "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "message": message}},
    }


def test_ready_graph_is_ready():
    assert gw.diagnose(READY, [pod("p", running())], NOW)[0] == "ready"


def test_loading_graph_keeps_waiting():
    state, message = gw.diagnose(GRAPH, [pod("decode-0", running()), pod("decode-1", running())], NOW)
    assert state == "waiting" and "desired=1, available=0" in message
    assert gw.diagnose(None, [], NOW)[0] == "waiting"


def test_an_update_not_yet_observed_is_not_ready():
    changed = {
        "metadata": {"name": "g", "generation": 3},
        "status": {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert gw.diagnose(changed, [], NOW)[0] == "waiting"
    changed["status"]["observedGeneration"] = 3
    assert gw.diagnose(changed, [], NOW)[0] == "ready"


def test_a_changed_graph_replaces_the_ready_job_so_up_waits_again():
    from conftest import render_with

    def ready_job(r):
        (job,) = [j for j in by_kind(r.objects, "Job") if j["metadata"]["name"] == names.NAMES["ready"]]
        return job["spec"]["template"]["metadata"]["annotations"]["kimi-k3.io/graph-spec-sha256"]

    base = render_with("gb300-disagg")
    assert ready_job(base) == ready_job(render_with("gb300-disagg"))
    assert ready_job(base) != ready_job(render_with("gb300-disagg", serving={"pdRatio": "1:1"}))


def test_one_crash_is_tolerated_the_second_fails_with_the_reason():
    assert gw.diagnose(GRAPH, [pod("decode-wkr-0", crashing(1))], NOW)[0] == "waiting"
    state, message = gw.diagnose(GRAPH, [pod("decode-wkr-0", crashing(2))], NOW)
    assert state == "failed"
    assert message.startswith("pod decode-wkr-0 container main restarted 2 times")
    assert "\\/model-cache/moonshotai/Kimi-K3 not found" in message and "code 1" in message


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"])
def test_a_container_that_cannot_start_fails_at_once(reason):
    status = {"name": "main", "restartCount": 0, "state": {"waiting": {"reason": reason, "message": "m"}}}
    assert gw.diagnose(GRAPH, [pod("frontend-0", status)], NOW) == (
        "failed",
        f"pod frontend-0 container main: {reason}: m",
    )


def test_unschedulable_pods_fail_after_the_grace():
    def unschedulable(minutes):
        since = (NOW - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")
        return pod(
            "prefill-0",
            phase="Pending",
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": since,
                    "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu",
                }
            ],
        )

    assert gw.diagnose(GRAPH, [unschedulable(5)], NOW)[0] == "waiting"
    state, message = gw.diagnose(GRAPH, [unschedulable(20)], NOW)
    assert state == "failed" and "Insufficient nvidia.com/gpu" in message


def test_main_reports_the_failure_and_exits_nonzero(monkeypatch, capsys):
    observations = iter([(GRAPH, [pod("w", running())]), (GRAPH, [pod("w", crashing(2))])])
    current = {}

    def fake_get(path):
        if "dynamographdeployments" in path:
            current["graph"], current["pods"] = next(observations)
            return current["graph"]
        return {"items": current["pods"]}

    monkeypatch.setattr(gw, "_get", fake_get)
    monkeypatch.setattr(gw.time, "sleep", lambda s: None)
    monkeypatch.setenv("GRAPH_NAME", "kimi-k3-gb300")
    monkeypatch.setenv("GRAPH_NAMESPACE", "kimi-k3")
    monkeypatch.setenv("POD_SELECTOR", "kimi-k3.io/graph=kimi-k3-gb300")
    monkeypatch.setenv("DEADLINE_SECONDS", "600")
    assert gw.main() == 1
    assert "pod w container main restarted 2 times" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ await configuration
def _objects(rendered, stack):
    objects = rendered[stack].objects
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    (job,) = [j for j in by_kind(objects, "Job") if j["metadata"]["name"] == names.NAMES["ready"]]
    return objects, dgd, job


@pytest.mark.parametrize("stack", STACKS)
def test_up_waits_on_the_graph_ready_job_which_reports_failure(stack, rendered):
    objects, dgd, job = _objects(rendered, stack)
    assert aw.awaiter(dgd) == "skip" and aw.awaiter(job) == "job"
    # The watcher decides once (backoffLimit 0): its failure is the Job's failure, reported at once.
    assert job["spec"]["backoffLimit"] == 0
    assert aw.seconds_until_failure_reported(job, attempt_seconds=gw.POLL_SECONDS) == gw.POLL_SECONDS
    assert job["spec"]["activeDeadlineSeconds"] < aw.timeout_seconds(job)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    # It watches every pod of this graph: the selector's label is on every component's pod template.
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    key, value = env["POD_SELECTOR"].split("=")
    assert all(c["podTemplate"]["metadata"]["labels"][key] == value for c in dgd["spec"]["components"])
    assert env["GRAPH_NAME"] == dgd["metadata"]["name"] == value
    # Least privilege: get this graph, list pods.
    (role,) = by_kind(objects, "Role")
    assert role["rules"] == [
        {
            "apiGroups": ["nvidia.com"],
            "resources": ["dynamographdeployments"],
            "resourceNames": [value],
            "verbs": ["get"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    (cm,) = [c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"] == names.NAMES["watch"]]
    assert cm["data"]["graph_watch.py"] == graph_ready.WATCH_SCRIPT.read_text()
    assert pod["serviceAccountName"] == names.NAMES["watch"]
    assert {r["type"] for r in rendered[stack].resources if r["name"] == "kimi-k3-serving-ready"} == {
        "kubernetes:batch/v1:Job"
    }


@pytest.mark.parametrize("stack", STACKS)
def test_old_form_waits_the_full_timeout_and_the_rule_says_so(stack, rendered):
    objects, dgd, job = _objects(rendered, stack)
    old = copy.deepcopy(dgd)
    old["metadata"]["annotations"] = {"pulumi.com/waitFor": "condition=Ready", "pulumi.com/timeoutSeconds": "14400"}
    old["status"] = {"conditions": [{"type": "Ready", "status": "False", "reason": "ComponentsNotReady"}]}
    assert aw.awaiter(old) == "custom" and aw.outcome(old)[0] == "waiting"
    assert aw.seconds_until_failure_reported(old, 60) == 14400

    def findings(objs):
        return [v.message for v in rules.run_all(objs)[0] if v.rule == "graph-await-reports-failure"]

    assert findings(objects) == []
    assert len(findings([old])) == 1
