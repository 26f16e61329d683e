"""deployment.py -> jobs.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kimi_k3.config.trace import BenchmarkTraceConfig
from kimi_k3.graph.model import Role, ServingGraph
from kimi_k3.k8s import benchmark_trace
from kimi_k3.k8s.deployment import (
    _gpu_group_placement,
    compute_domain_name,
    graph_deployment,
    runtime_security_context,
    smoke_block_size,
)
from kimi_k3.k8s.model_cache import AWAIT_GRACE_SECONDS
from kimi_k3.k8s.objects import (
    Obj,
    _arch_requirement,
    _env,
    _meta,
    _node_affinity,
    _resources,
    with_config_checksums,
)
from kimi_k3.names import CACHE_VOLUME, CHANNEL_CLAIM, GRAPH_LABEL, NAMES, PART_OF
from kimi_k3.pods import program_path, smoke, workload

SMOKE_SCRIPT = program_path("smoke.py")  # the same smoke test `kimi-k3 rehearse` runs locally


SMOKE_WAIT_SECONDS = 300  # the frontend Service may lag the graph's Ready condition


SMOKE_DEADLINE_SECONDS = 1200  # the whole Job, retries included; `pulumi up` fails after it


WORKLOAD_SCRIPT = Path(workload.__file__)  # the workload `kimi-k3 rehearse` runs locally, and the Job's runner


BENCHMARK_DIR = "/benchmark"  # the runner and its plan (ConfigMap)


BENCHMARK_RESULTS = "/results"  # AIPerf's --artifact-dir per run (emptyDir; the summaries go to the log)


BENCHMARK_START_SECONDS = 600  # image pull (AIPerf's image is ~2 GB) and pod start, before the first run


BENCHMARK_UID = 1000  # the user AIPerf's own manifests run its image as (aiperf kube generate)


# Guaranteed QoS, so the client is neither throttled below its need nor evicted during a measurement. Memory: the
# rehearsal's AIPerf measured ~0.2 GiB RSS at this workload (2 processes, agentic, 32 requests); AIPerf's own
# estimate for its services is ~2 GiB (aiperf kube generate's memory estimator: controller 1388 MiB + one worker
# pod 632 MiB). Its workers are capped at --concurrency (aiperf/workers/worker_manager.py).
BENCHMARK_RESOURCES = {
    "requests": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "1Gi"},
    "limits": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "5Gi"},
}


WATCH_SCRIPT = program_path("graph_watch.py")


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


def benchmark_plan(graph: ServingGraph, w: workload.Workload, trace: BenchmarkTraceConfig | None = None) -> Obj:
    """What the benchmark Job runs: the rehearsal's workload (workload.profile_args) against the frontend Service,
    tokenized by the model's own tokenizer from the cache (remote code, as the graph's --trust-remote-code); with
    a trace, its replay instead (kimi_k3/k8s/benchmark_trace.py)."""
    if trace is not None:
        return benchmark_trace.trace_plan(graph, trace, frontend_url(graph), BENCHMARK_RESULTS)
    return {
        "run_deadline_seconds": w.run_deadline_seconds(),
        "runs": {
            kind: workload.profile_args(
                kind,
                w,
                model=graph.served_model_name,
                url=frontend_url(graph),
                tokenizer=graph.model_path,
                artifact_dir=f"{BENCHMARK_RESULTS}/{kind}",
                extra=["--tokenizer-trust-remote-code"],
            )
            for kind in w.runs
        },
    }


def benchmark_config_map(graph: ServingGraph, w: workload.Workload, trace: BenchmarkTraceConfig | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(graph, NAMES["benchmark"]),
        "data": {
            WORKLOAD_SCRIPT.name: WORKLOAD_SCRIPT.read_text(),
            "plan.json": json.dumps(benchmark_plan(graph, w, trace), indent=1) + "\n",
        },
    }


def benchmark_job(
    graph: ServingGraph,
    w: workload.Workload,
    image: str,
    node_selector: dict[str, str] | None = None,
    trace: BenchmarkTraceConfig | None = None,
) -> Obj:
    """AIPerf against the frontend Service, after the smoke test: the rehearsal's runs, one after the other, in
    AIPerf's own image. No API access (no service account token), non-root, read-only root and model cache,
    Guaranteed resources; each run's summary stays in the Job's log (`kubectl logs job/kimi-k3-benchmark`)."""
    plan = benchmark_plan(graph, w, trace)
    deadline = int(BENCHMARK_START_SECONDS + len(plan["runs"]) * plan["run_deadline_seconds"])
    # A changed graph or workload changes the pod template, so the Job is replaced and measures again.
    graph_hash = hashlib.sha256(json.dumps(graph_deployment(graph), sort_keys=True).encode()).hexdigest()[:16]
    plan_hash = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]
    tmp = {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}
    results = {"name": "results", "emptyDir": {"sizeLimit": "1Gi"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(graph, NAMES["benchmark"], annotations={"pulumi.com/timeoutSeconds": str(deadline + 60)}),
        "spec": {
            "backoffLimit": 0,  # a second try would measure a cache the first one warmed
            "activeDeadlineSeconds": deadline,
            "template": {
                "metadata": with_config_checksums(
                    {
                        "labels": {**PART_OF, "app.kubernetes.io/component": "benchmark"},
                        "annotations": {"kimi-k3.io/graph-sha256": graph_hash, "kimi-k3.io/plan-sha256": plan_hash},
                    },
                    benchmark_config_map(graph, w, trace),
                ),
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,  # AIPerf profile only talks to the frontend
                    "enableServiceLinks": False,
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": BENCHMARK_UID,
                        "runAsGroup": BENCHMARK_UID,
                        "fsGroup": BENCHMARK_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "aiperf",
                            "image": image,
                            "command": ["python", f"{BENCHMARK_DIR}/{WORKLOAD_SCRIPT.name}"],
                            "args": [
                                "--plan",
                                f"{BENCHMARK_DIR}/plan.json",
                                "--termination-log",
                                "/dev/termination-log",
                            ],
                            # AIPerf's datasets and IPC sockets go to TMPDIR; remote tokenizer code to HF_HOME.
                            "env": _env(
                                [
                                    ("TMPDIR", "/tmp"),
                                    ("HOME", "/tmp"),
                                    ("HF_HOME", "/tmp/hf-home"),
                                    ("HF_HUB_DISABLE_TELEMETRY", "1"),
                                    ("DO_NOT_TRACK", "1"),
                                    ("PYTHONUNBUFFERED", "1"),
                                ]
                            ),
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                            "resources": BENCHMARK_RESOURCES,
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "volumeMounts": [
                                {"name": "benchmark", "mountPath": BENCHMARK_DIR, "readOnly": True},
                                {"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True},
                                {"name": "tmp", "mountPath": "/tmp"},
                                {"name": "results", "mountPath": BENCHMARK_RESULTS},
                                *([benchmark_trace.mount()] if trace else []),
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "benchmark", "configMap": {"name": NAMES["benchmark"]}},
                        {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": NAMES["pvc"], "readOnly": True}},
                        tmp,
                        results,
                        *([benchmark_trace.volume(trace)] if trace else []),
                    ],
                },
            },
        },
    }


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
            "claims": [{"name": CHANNEL_CLAIM}],
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
