"""The graph-ready Job and its RBAC: `pulumi up` waits on it until the DynamoGraphDeployment is Ready."""

from __future__ import annotations

import hashlib
import json

from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s.deployment import graph_deployment
from kimi_k3.k8s.model_cache import AWAIT_GRACE_SECONDS
from kimi_k3.k8s.objects import Obj, _arch_requirement, _env, _meta, _node_affinity, with_config_checksums
from kimi_k3.names import GRAPH_LABEL, NAMES, PART_OF
from kimi_k3.pods import program_path

WATCH_SCRIPT = program_path("graph_watch.py")


def graph_watch_objects(graph: ServingGraph, image: str, node_selector: dict[str, str] | None = None) -> list[Obj]:
    """ServiceAccount, Role (get this graph, list pods), RoleBinding, script and the graph-ready Job, which
    `pulumi up` awaits with pulumi-kubernetes' Job await: Ready -> done; a pod that cannot run -> failed."""
    n = NAMES
    hardened = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(graph, n["watch"])}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(graph, n["watch"]),
        "rules": [
            {
                "apiGroups": ["nvidia.com"],
                "resources": ["dynamographdeployments"],
                "resourceNames": [graph.name],
                "verbs": ["get"],
            },
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(graph, n["watch"]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n["watch"]},
        "subjects": [{"kind": "ServiceAccount", "name": n["watch"], "namespace": graph.namespace}],
    }
    script = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, n["watch"]),
        "data": {WATCH_SCRIPT.name: WATCH_SCRIPT.read_text()},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(
            graph,
            n["ready"],
            annotations={"pulumi.com/timeoutSeconds": str(graph.ready_timeout_seconds + AWAIT_GRACE_SECONDS)},
        ),
        "spec": {
            "backoffLimit": 0,  # the script already waited; its verdict is final
            "activeDeadlineSeconds": graph.ready_timeout_seconds,
            "podFailurePolicy": {
                "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
            },
            "template": {
                # A changed graph changes this Job's template, so Pulumi replaces the Job and `up` waits again.
                "metadata": with_config_checksums(
                    {
                        "labels": {**PART_OF, "app.kubernetes.io/component": "graph-ready"},
                        "annotations": {
                            "kimi-k3.io/graph-spec-sha256": hashlib.sha256(
                                json.dumps(graph_deployment(graph)["spec"], sort_keys=True).encode()
                            ).hexdigest()
                        },
                    },
                    script,
                ),
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": n["watch"],
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": _node_affinity(_arch_requirement(graph.download_arch)),
                    "containers": [
                        {
                            "name": "watch",
                            "image": image,
                            "command": ["python3", f"/scripts/{WATCH_SCRIPT.name}"],
                            "env": _env(
                                [
                                    ("GRAPH_NAME", graph.name),
                                    ("GRAPH_NAMESPACE", graph.namespace),
                                    ("POD_SELECTOR", f"{GRAPH_LABEL}={graph.name}"),
                                    ("DEADLINE_SECONDS", str(graph.ready_timeout_seconds)),
                                ]
                            ),
                            "securityContext": hardened,
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "scripts", "configMap": {"name": n["watch"]}}],
                },
            },
        },
    }
    return [sa, role, binding, script, job]
