"""autoscaling.py -> planner.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kimi_k3.graph.autoscaling import facts

PLANNER_COMPONENT = "Planner"


NAMES = {"config": "kimi-k3-planner-config", "profile": "kimi-k3-planner-profile-data", "rbac": "kimi-k3-planner"}


CONFIG_HASH = "kimi-k3.io/planner-config-hash"


Obj = dict[str, Any]


def _meta(graph, name: str) -> Obj:
    return {"name": name, "namespace": graph.namespace, "labels": {"app.kubernetes.io/part-of": "kimi-k3"}}


def config_maps(graph) -> list[Obj]:
    """The planner's config and its profile data, each a ConfigMap the Planner component mounts."""
    a, f = graph.autoscaling, facts()["planner"]
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(graph, NAMES["config"]),
            "data": {f["config_file"]: a.config_json},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(graph, NAMES["profile"]),
            "data": dict(a.profile_files),
        },
    ]


def rbac(graph) -> list[Obj]:
    """What Dynamo 1.6.1's planner calls, granted to the ServiceAccount the operator runs planner pods as, in the
    graph's namespace only (the chart's own planner role may be older than the planner image)."""
    f = facts()["planner"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(graph, NAMES["rbac"]),
        "rules": [dict(r) for r in f["rbac"]],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(graph, NAMES["rbac"]),
        "subjects": [{"kind": "ServiceAccount", "name": f["service_account"], "namespace": graph.namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAMES["rbac"]},
    }
    return [role, binding]


def planner_component(graph, pod_labels: dict[str, str], affinity: Obj) -> Obj:
    """The DGD component that runs the planner, with its config and profile data mounted read-only."""
    a, f = graph.autoscaling, facts()["planner"]
    container = {
        "name": "main",
        "image": a.image,
        "command": list(f["command"]),
        "args": ["--config", f"{f['config_mount']}/{f['config_file']}"],
        "env": [{"name": "PROMETHEUS_ENDPOINT", "value": a.prometheus_endpoint}],
        "resources": {"requests": dict(f["resources"]), "limits": dict(f["resources"])},
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": [
            {"name": "planner-config", "mountPath": f["config_mount"], "readOnly": True},
            {"name": "planner-profile-data", "mountPath": f["profile_mount"], "readOnly": True},
        ],
    }
    # The planner reads its config once at start: a changed config or profile changes the pod, which restarts it.
    digest = hashlib.sha256(json.dumps([a.config_json, a.profile_files]).encode()).hexdigest()[:16]
    return {
        "name": PLANNER_COMPONENT,
        "type": "planner",
        "replicas": 1,
        "podTemplate": {
            "metadata": {"labels": pod_labels, "annotations": {CONFIG_HASH: digest}},
            "spec": {
                "affinity": affinity,
                "volumes": [
                    {"name": "planner-config", "configMap": {"name": NAMES["config"]}},
                    {"name": "planner-profile-data", "configMap": {"name": NAMES["profile"]}},
                ],
                "containers": [container],
            },
        },
    }


def hand_over_replicas(component: Obj) -> Obj:
    """A worker component whose replicas the planner owns: no count from us, the operator's scaling adapter on."""
    out = {k: v for k, v in component.items() if k != "replicas"}
    out["scalingAdapter"] = {}
    return out
