"""The fabric preflight: one Indexed Job per multi-node role that checks its TP group's fabric before the graph."""

from __future__ import annotations

from kimi_k3.graph.model import Role, ServingGraph
from kimi_k3.k8s.deployment import _gpu_group_placement, compute_domain_name, gpu_claims, runtime_security_context
from kimi_k3.k8s.model_cache import AWAIT_GRACE_SECONDS
from kimi_k3.k8s.objects import Obj, _env, _meta, _resources, with_config_checksums
from kimi_k3.names import PART_OF
from kimi_k3.pods import program_path

PREFLIGHT_SCRIPT = program_path("fabric_preflight.py")


PREFLIGHT_LABEL = "kimi-k3.io/preflight"


PREFLIGHT_PORT = 29500  # torch.distributed rendezvous on the index-0 pod


# systemd puts each system service in its own cgroup under system.slice (cgroup v2, AL2023's default hierarchy:
# systemd.special(7) "system.slice"); the preflight mounts it read-only where fabric_preflight.py looks.
HOST_SYSTEM_SLICE = "/sys/fs/cgroup/system.slice"


PREFLIGHT_HOST_SERVICES = "/host/system.slice"


def preflight_name(graph: ServingGraph, role: Role) -> str:
    return f"{graph.name}-{role.key}-preflight"


def preflight_script_config_map(graph: ServingGraph) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, f"{graph.name}-preflight-script"),
        "data": {PREFLIGHT_SCRIPT.name: PREFLIGHT_SCRIPT.read_text()},
    }


def preflight_service(graph: ServingGraph, role: Role) -> Obj:
    """Headless Service: stable DNS for the index-0 pod (<job>-0.<service>) as rendezvous."""
    name = preflight_name(graph, role)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(graph, name),
        "spec": {
            "clusterIP": "None",
            "selector": {PREFLIGHT_LABEL: name},
            "ports": [{"name": "rendezvous", "port": PREFLIGHT_PORT}],
        },
    }


def preflight_job(graph: ServingGraph, role: Role, min_bus_bandwidth_gbps: float, timeout_seconds: int) -> Obj:
    """One pod per node of one TP group of `role`, placed as the role's workers are (same GPUs, same clique
    pinning, same ComputeDomain channel), running kimi_k3/pods/fabric_preflight.py. The graph waits for it."""
    name = preflight_name(graph, role)
    env = _env(
        [
            ("NNODES", str(role.nodes_per_replica)),
            ("GPUS_PER_NODE", str(role.gpus_per_node)),
            ("MASTER_ADDR", f"{name}-0.{name}"),
            ("MASTER_PORT", str(PREFLIGHT_PORT)),
            ("MIN_BUS_BANDWIDTH_GBPS", f"{min_bus_bandwidth_gbps:g}"),
            ("COMPUTE_DOMAIN", compute_domain_name(graph, role)),
            ("HOST_SERVICES", PREFLIGHT_HOST_SERVICES),
        ]
    )
    env.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    container = {
        "name": "preflight",
        "image": graph.image,
        "command": ["python3", f"/scripts/{PREFLIGHT_SCRIPT.name}"],
        "env": env,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {
            **_resources(role.gpus_per_node, None, None, role.efa_devices),
            "claims": gpu_claims(graph, role),
        },
        "volumeMounts": [
            {"name": "scripts", "mountPath": "/scripts", "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "host-services", "mountPath": PREFLIGHT_HOST_SERVICES, "readOnly": True},
        ],
        "securityContext": runtime_security_context(),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # pulumi-kubernetes' own Job await (no waitFor, which could only succeed or time out): a failed check
        # fails `up` at once with the pod's log tail; the deadline names a check that never finished.
        "metadata": _meta(
            graph, name, annotations={"pulumi.com/timeoutSeconds": str(timeout_seconds + AWAIT_GRACE_SECONDS)}
        ),
        "spec": {
            "completionMode": "Indexed",
            "completions": role.nodes_per_replica,
            "parallelism": role.nodes_per_replica,
            "backoffLimit": 0,
            "activeDeadlineSeconds": timeout_seconds,
            "template": {
                "metadata": with_config_checksums(
                    {"labels": {**PART_OF, PREFLIGHT_LABEL: name, "app.kubernetes.io/component": "fabric-preflight"}},
                    preflight_script_config_map(graph),
                ),
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": name,
                    **_gpu_group_placement(graph, role, {PREFLIGHT_LABEL: name}),
                    "containers": [container],
                    # Step 1 reads the host's systemd service cgroups (read-only) instead of every host process
                    # (hostPID): a running nvidia-imex.service is a populated system.slice/nvidia-imex.service.
                    "volumes": [
                        {"name": "scripts", "configMap": {"name": f"{graph.name}-preflight-script"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                        {"name": "host-services", "hostPath": {"path": HOST_SYSTEM_SLICE, "type": "Directory"}},
                    ],
                },
            },
        },
    }
