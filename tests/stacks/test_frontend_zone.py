"""Issue 19 finding 8: the frontend (HTTP, tokenizer, KV router) runs in the workers' zone. It was pinned to the
amd64 system nodes in us-east-1a/b while the workers sit on arm64 GPU nodes in the Dallas Local Zone, so every
request, streamed chunk and KV event crossed the Local Zone link."""

from __future__ import annotations

import copy

import pytest
from conftest import STACKS, by_kind, render_with

from kimi_k3.facts.images import image_facts
from policies import rules
from policies.rules.placement import ZONE_LABEL, _selects

RULE = "frontend-in-workers-zone"
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _components(objects):
    return by_kind(objects, "DynamoGraphDeployment")[0]["spec"]["components"]


def _frontend(objects):
    return next(c for c in _components(objects) if c["type"] == "frontend")


def _fired(objects):
    violations, _ = rules.run_all(objects)
    return [v.message for v in violations if v.rule == RULE]


def _node_terms(spec):
    return spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


@pytest.mark.parametrize("stack", STACKS)
def test_frontend_follows_the_workers_into_their_zone(stack, rendered):
    objects = rendered[stack].objects
    fe = _frontend(objects)
    spec = fe["podTemplate"]["spec"]
    workers = [c for c in _components(objects) if c["type"] in ("worker", "prefill", "decode")]
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == ZONE_LABEL
    for w in workers:
        assert _selects(term["labelSelector"], w["podTemplate"]["metadata"]["labels"]), w["name"]
    assert not _selects(term["labelSelector"], fe["podTemplate"]["metadata"]["labels"]), "not itself"
    # eks: the GPU nodes' zone (Pulumi.<stack>.yaml gpuNodes.availabilityZone), the only nodes there are GPU nodes
    (nodes,) = _node_terms(spec)
    assert {"key": ZONE_LABEL, "operator": "In", "values": ["us-east-1-dfw-2a"]} in nodes["matchExpressions"]
    assert GPU_TAINT in spec["tolerations"]
    (arch,) = [e for e in nodes["matchExpressions"] if e["key"] == "kubernetes.io/arch"]
    assert "arm64" in arch["values"], "the GPU nodes are arm64 (Grace)"
    assert set(arch["values"]) <= image_facts(fe["podTemplate"]["spec"]["containers"][0]["image"]).arch
    assert _fired(objects) == []


@pytest.mark.parametrize("stack", STACKS)
def test_rule_fails_on_the_old_render(stack, rendered):
    old = copy.deepcopy(rendered[stack].objects)
    spec = _frontend(old)["podTemplate"]["spec"]
    # the frontend's placement as rendered before this fix: the system nodes' architecture, nothing else
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
                ]
            }
        }
    }
    spec.pop("tolerations")
    (message,) = _fired(old)
    assert message.startswith("component Frontend: nothing keeps it in the zone of the workers")


def test_rule_accepts_one_zone_pinned_on_both_and_refuses_two(rendered):
    objects = copy.deepcopy(rendered["gb300-disagg"].objects)
    fe = _frontend(objects)["podTemplate"]["spec"]
    fe["affinity"].pop("podAffinity")
    assert len(_fired(objects)) == 1, "the frontend's zone alone: the workers are not pinned to it"
    for w in _components(objects):
        if w["type"] in ("prefill", "decode"):
            _node_terms(w["podTemplate"]["spec"])[0]["matchExpressions"].append(
                {"key": ZONE_LABEL, "operator": "In", "values": ["us-east-1-dfw-2a"]}
            )
    assert _fired(objects) == []
    _node_terms(fe)[0]["matchExpressions"][-1]["values"] = ["us-east-1-dfw-2a", "us-east-1a"]
    assert len(_fired(objects)) == 1, "a frontend that may sit in either zone is not in the workers'"


def test_rule_fails_when_the_zone_term_misses_a_role(rendered):
    objects = copy.deepcopy(rendered["gb300-disagg"].objects)
    fe = _frontend(objects)["podTemplate"]["spec"]
    fe["affinity"].pop("nodeAffinity")
    term = fe["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["labelSelector"]["matchExpressions"][0]["values"] = ["prefill"]
    (message,) = _fired(objects)
    assert "select not every worker's pods" in message


def test_existing_cluster_keeps_the_frontend_with_the_workers_by_pod_affinity():
    r = render_with(
        "gb300",
        cluster={"mode": "existing", "context": "gb300-prod"},
        kubeconfig="apiVersion: v1\n",
        storage={"kind": "existing", "storageClass": "fsx-lustre", "provisioner": "fsx.csi.aws.com"},
    )
    spec = _frontend(r.objects)["podTemplate"]["spec"]
    (nodes,) = _node_terms(spec)
    assert [e["key"] for e in nodes["matchExpressions"]] == ["kubernetes.io/arch"], "no zone known here"
    assert (
        spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
        == ZONE_LABEL
    )
    assert _fired(r.objects) == []


def test_planner_stays_on_the_system_nodes():
    """Only the request path moves: the SLA planner talks to Prometheus and the operator (control traffic)."""
    from test_autoscaling import ON, cluster

    r = render_with("gb300-disagg", cluster=cluster("gb300-disagg", desiredNodes=18), serving={"autoscaling": ON})
    planner = next(c for c in _components(r.objects) if c["type"] == "planner")
    (nodes,) = _node_terms(planner["podTemplate"]["spec"])
    assert nodes["matchExpressions"] == [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
