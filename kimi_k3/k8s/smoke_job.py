"""The smoke-test Job: the smoke test against the frontend Service once the graph is Ready, as `rehearse` runs it."""

from __future__ import annotations

import hashlib
import json

from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s.deployment import graph_deployment, smoke_block_size
from kimi_k3.k8s.objects import Obj, _arch_requirement, _meta, _node_affinity, with_config_checksums
from kimi_k3.names import NAMES, PART_OF
from kimi_k3.pods import program_path, smoke

SMOKE_SCRIPT = program_path("smoke.py")  # the same smoke test `kimi-k3 rehearse` runs locally


SMOKE_WAIT_SECONDS = 300  # the frontend Service may lag the graph's Ready condition


SMOKE_DEADLINE_SECONDS = 1200  # the whole Job, retries included; `pulumi up` fails after it


def smoke_script_config_map(graph: ServingGraph) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, NAMES["smoke"]),
        "data": {SMOKE_SCRIPT.name: SMOKE_SCRIPT.read_text()},
    }


def frontend_url(graph: ServingGraph) -> str:
    """The frontend Service, as the in-cluster Jobs (smoke test, benchmark) reach it."""
    return f"http://{graph.frontend_service}.{graph.namespace}.svc.cluster.local:{graph.frontend.http_port}"


def smoke_job(graph: ServingGraph, image: str, node_selector: dict[str, str] | None = None) -> Obj:
    """The smoke test against the frontend Service once the graph is Ready, plus what only the real model shows
    (reasoning_content, a parsed tool call, an image input). The provider's Job await fails `pulumi up` when the
    Job fails; the failed checks are in the pod's termination message and log."""
    url = frontend_url(graph)
    max_len = max(r.max_model_len for r in graph.roles)
    block = smoke_block_size(graph)
    # A changed graph changes the pod template, so the Job is replaced and the smoke test runs again.
    graph_hash = hashlib.sha256(json.dumps(graph_deployment(graph), sort_keys=True).encode()).hexdigest()[:16]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(
            graph, NAMES["smoke"], annotations={"pulumi.com/timeoutSeconds": str(SMOKE_DEADLINE_SECONDS + 60)}
        ),
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": SMOKE_DEADLINE_SECONDS,
            "template": {
                "metadata": with_config_checksums(
                    {
                        "labels": {**PART_OF, "app.kubernetes.io/component": "smoke-test"},
                        "annotations": {"kimi-k3.io/graph-sha256": graph_hash},
                    },
                    smoke_script_config_map(graph),
                ),
                "spec": {
                    "restartPolicy": "Never",
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": _node_affinity(_arch_requirement(graph.download_arch)),
                    "containers": [
                        {
                            "name": "smoke",
                            "image": image,
                            "command": ["python3", f"/smoke/{SMOKE_SCRIPT.name}"],
                            "args": [
                                "--url",
                                url,
                                "--served-model-name",
                                graph.served_model_name,
                                "--max-model-len",
                                str(max_len),
                                "--kv-block-size",
                                str(block),
                                "--cache-probe-tokens",
                                str(smoke.probe_tokens(block)),
                                "--real-model",
                                "--wait-seconds",
                                str(SMOKE_WAIT_SECONDS),
                                "--termination-log",
                                "/dev/termination-log",
                            ],
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "resources": {
                                "requests": {"cpu": "100m", "memory": "128Mi"},
                                "limits": {"memory": "256Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "runAsNonRoot": True,
                                "runAsUser": 65534,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "volumeMounts": [{"name": "smoke", "mountPath": "/smoke", "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "smoke", "configMap": {"name": NAMES["smoke"]}}],
                },
            },
        },
    }
