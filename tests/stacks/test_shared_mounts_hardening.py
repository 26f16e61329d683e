"""Issue 19 finding 9 (the parts kept here): capabilities, BestEffort serving pods, script ConfigMaps that roll their
pods, the preflight without hostPID, and a NetworkPolicy in front of the weights-prefetch peers."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import STACKS, by_kind, render_with

from kimi_k3.config.stack import parse_stack_config
from kimi_k3.config.stack_files import read_stack_config
from kimi_k3.graph.build import build_graph
from kimi_k3.k8s import graph_ready, model_cache, node_local, preflight_job, smoke_job
from policies import rules
from policies.rules import base
from policies.rules.base import all_containers, pod_specs

QOS = "serving-containers-request-resources"


def dgd(objects):
    (d,) = by_kind(objects, "DynamoGraphDeployment")
    return d


@pytest.mark.parametrize("stack", STACKS)
def test_no_container_adds_capabilities_it_cannot_use(stack, rendered):
    # A non-root process gets no added capability (no ambient set): IPC_LOCK/SYS_RESOURCE did nothing as uid 1000.
    for obj in rendered[stack].objects:
        for label, spec in pod_specs(obj):
            for c in all_containers(spec):
                sc = c.get("securityContext") or {}
                assert not (sc.get("capabilities") or {}).get("add"), (obj["metadata"]["name"], c["name"])
    for comp in dgd(rendered[stack].objects)["spec"]["components"]:
        (main,) = comp["podTemplate"]["spec"]["containers"]
        assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert main["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("stack", STACKS)
def test_every_serving_component_requests_cpu_and_memory(stack, rendered):
    for comp in dgd(rendered[stack].objects)["spec"]["components"]:
        (main,) = comp["podTemplate"]["spec"]["containers"]
        requests = main["resources"]["requests"]
        assert {"cpu", "memory"} <= set(requests), comp["name"]
    v, _ = base.evaluate(rules.RULES_BY_NAME[QOS], rendered[stack].objects, base.Context())
    assert v == []


@pytest.mark.parametrize("stack", ["gb300", "gb300-disagg", "gb200"])
def test_the_old_besteffort_form_fails_the_rule(stack, rendered):
    objects = json.loads(json.dumps(rendered[stack].objects))
    for comp in dgd(objects)["spec"]["components"]:
        res = comp["podTemplate"]["spec"]["containers"][0].get("resources") or {}
        for part in ("requests", "limits"):
            for k in ("cpu", "memory"):
                (res.get(part) or {}).pop(k, None)
    v, _ = base.evaluate(rules.RULES_BY_NAME[QOS], objects, base.Context())
    assert {x.message.split(":")[0] for x in v} == {
        f"component {c['name']}" for c in dgd(objects)["spec"]["components"]
    }


# ------------------------------------------------------------------------------------------ script ConfigMaps
def _mounted_config_maps(spec):
    return {v["configMap"]["name"] for v in spec.get("volumes") or [] if "configMap" in v}


def _templates(obj):
    """(pod template metadata, pod spec) of the workloads whose pods a changed template rolls or replaces."""
    if obj["kind"] in ("Job", "DaemonSet", "Deployment", "StatefulSet"):
        t = obj["spec"]["template"]
        yield t.get("metadata") or {}, t["spec"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_workload_carries_the_content_hash_of_each_configmap_it_mounts(stack, rendered):
    objects = rendered[stack].objects
    config_maps = {o["metadata"]["name"]: o for o in by_kind(objects, "ConfigMap")}
    seen = 0
    for obj in objects:
        for meta, spec in _templates(obj):
            for name in _mounted_config_maps(spec) & set(config_maps):
                want = hashlib.sha256(json.dumps(config_maps[name]["data"], sort_keys=True).encode()).hexdigest()
                assert (meta.get("annotations") or {}).get(f"checksum.kimi-k3.io/{name}") == want, (
                    obj["metadata"]["name"],
                    name,
                )
                seen += 1
    assert seen >= 4, "verify, watch, prefetch, preflight (and smoke where on)"


def _graph(stack="gb300-disagg"):
    f = read_stack_config(stack)
    return build_graph(stack, parse_stack_config(f.config, f.secrets))


@pytest.mark.parametrize(
    "module, script_attr, build",
    [
        (node_local, "PREFETCH_SCRIPT", lambda g: node_local.weights_prefetch_objects(g, "python:3.12-slim")[2]),
        (model_cache, "VERIFY_SCRIPT", lambda g: model_cache.download_job(g, "python:3.12-slim", "1.0.0")),
        (graph_ready, "WATCH_SCRIPT", lambda g: graph_ready.graph_watch_objects(g, "python:3.12-slim")[-1]),
        (preflight_job, "PREFLIGHT_SCRIPT", lambda g: preflight_job.preflight_job(g, g.roles[0], 300, 600)),
        (smoke_job, "SMOKE_SCRIPT", lambda g: smoke_job.smoke_job(g, "python:3.12-slim")),
    ],
)
def test_changing_a_script_changes_the_pod_template(module, script_attr, build, monkeypatch, tmp_path):
    g = _graph()
    before = build(g)["spec"]["template"]
    original = getattr(module, script_attr)
    changed = tmp_path / original.name
    changed.write_text(original.read_text() + "\n# changed\n")
    monkeypatch.setattr(module, script_attr, changed)
    after = build(g)["spec"]["template"]
    assert after != before
    assert after["spec"] == before["spec"], "only the annotation moves: same volumes, same command"


# ------------------------------------------------------------------------------------------ fabric preflight
@pytest.mark.parametrize("stack", STACKS)
def test_preflight_sees_host_services_without_host_pid(stack, rendered):
    jobs = [o for o in by_kind(rendered[stack].objects, "Job") if o["metadata"]["name"].endswith("-preflight")]
    assert jobs
    for job in jobs:
        spec = job["spec"]["template"]["spec"]
        assert not spec.get("hostPID") and not spec.get("hostNetwork")
        volumes = {v["name"]: v for v in spec["volumes"]}
        (c,) = spec["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == env["HOST_SERVICES"]]
        assert mount["readOnly"] is True
        assert volumes[mount["name"]]["hostPath"]["path"] == "/sys/fs/cgroup/system.slice"


# ------------------------------------------------------------------------------------------ prefetch peers
@pytest.mark.parametrize("stack", STACKS)
def test_only_prefetch_pods_reach_the_peer_port(stack, rendered):
    objects = rendered[stack].objects
    (ds,) = [o for o in by_kind(objects, "DaemonSet") if o["metadata"]["name"] == "kimi-k3-weights-prefetch"]
    (svc,) = [o for o in by_kind(objects, "Service") if o["metadata"]["name"] == "kimi-k3-weights-peers"]
    (np,) = by_kind(objects, "NetworkPolicy")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    selector = np["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items(), "the policy selects the DaemonSet's pods"
    assert np["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"} and peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = [p["containerPort"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]]
    assert rule["ports"] == [{"protocol": "TCP", "port": port}] and svc["spec"]["ports"][0]["port"] == port
    # other pods of the namespace do not match the peer selector
    for obj in objects:
        for label, _ in pod_specs(obj):
            if obj is ds:
                continue
            labels = ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
            assert not selector.items() <= labels.items(), obj["metadata"]["name"]
    (cni,) = [
        x
        for x in rendered[stack].resources
        if x["type"] == "aws:eks/addon:Addon" and x["inputs"]["addonName"] == "vpc-cni"
    ]
    assert json.loads(cni["inputs"]["configurationValues"]) == {"enableNetworkPolicy": "true"}


def test_no_network_policy_without_node_local_weights():
    r = render_with("gb300", storage={"nodeLocalWeights": False})
    assert by_kind(r.objects, "NetworkPolicy") == []
