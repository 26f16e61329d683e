"""Kubernetes objects of the serving graph, as plain dicts (pure; components only register them)."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from . import smoke, workload
from .graph import Role, ServingGraph, compile_cache_spec, role_flag
from .monitoring import ROLE_LABEL, role_labels
from .images import kube_arch, runtime_user
from .data import recipe_file
from .weights_prefetch import READY_MARKER as PREFETCH_READY_MARKER

PART_OF = {"app.kubernetes.io/part-of": "kimi-k3"}
NVLINK_GROUP_LABEL = "kimi-k3.io/nvlink-group"
CLIQUE_KEY = "nvidia.com/gpu.clique"      # NVLink clique label set by GPU feature discovery
EFA_RESOURCE = "vpc.amazonaws.com/efa"    # extended resource of the EFA device plugin
CHANNEL_CLAIM = "compute-domain-channel"
CACHE_VOLUME = "model-cache"
HEALTH_PORT = 9090                         # Dynamo system server (/health), as upstream probes it
PROBE_PERIOD_SECONDS = 10
VERIFY_SCRIPT = Path(__file__).with_name("verify_checkpoint.py")
TOOLS_DIR = "/opt/hub"                     # emptyDir holding the pinned huggingface_hub install
SMOKE_SCRIPT = Path(__file__).with_name("smoke.py")   # the same smoke test `kimi-k3 rehearse` runs locally
SMOKE_WAIT_SECONDS = 300                   # the frontend Service may lag the graph's Ready condition
SMOKE_DEADLINE_SECONDS = 1200              # the whole Job, retries included; `pulumi up` fails after it
WORKLOAD_SCRIPT = Path(workload.__file__)  # the workload `kimi-k3 rehearse` runs locally, and the Job's runner
BENCHMARK_DIR = "/benchmark"               # the runner and its plan (ConfigMap)
BENCHMARK_RESULTS = "/results"             # AIPerf's --artifact-dir per run (emptyDir; the summaries go to the log)
BENCHMARK_START_SECONDS = 600              # image pull (AIPerf's image is ~2 GB) and pod start, before the first run
BENCHMARK_UID = 1000                       # the user AIPerf's own manifests run its image as (aiperf kube generate)
# Guaranteed QoS, so the client is neither throttled below its need nor evicted during a measurement. Memory: the
# rehearsal's AIPerf measured ~0.2 GiB RSS at this workload (2 processes, agentic, 32 requests); AIPerf's own
# estimate for its services is ~2 GiB (aiperf kube generate's memory estimator: controller 1388 MiB + one worker
# pod 632 MiB). Its workers are capped at --concurrency (aiperf/workers/worker_manager.py).
BENCHMARK_RESOURCES = {"requests": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "1Gi"},
                       "limits": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "5Gi"}}
# A pod that fails at once (bad token, wrong revision) fails the Job after 4 tries and 10+20+40 s of the Job
# controller's pod backoff: `pulumi up` reports it within minutes. A resumed `hf download` loses nothing.
DOWNLOAD_BACKOFF_LIMIT = 3
AWAIT_GRACE_SECONDS = 300                  # provider timeout beyond the Job's activeDeadlineSeconds
VERIFY_REPORT_SECONDS = 600                # Job deadline beyond the verify step's own wait (pip install, report)

Obj = dict[str, Any]


# Fixed names: the cache must keep its identity across recipe changes so weights are never re-created.
NAMES = {
    "secret": "kimi-k3-hf-token",
    "pvc": "kimi-k3-model-cache",
    "verify": "kimi-k3-verify-checkpoint",
    "job": "kimi-k3-model-download",
    "compile_cache": "kimi-k3-compile-cache",
    "prepull": "kimi-k3-image-prepull",
    "smoke": "kimi-k3-smoke-test",
    "benchmark": "kimi-k3-benchmark",
    "watch": "kimi-k3-graph-watch",
    "ready": "kimi-k3-graph-ready",
    "prefetch": "kimi-k3-weights-prefetch",
    "peers": "kimi-k3-weights-peers",
}
COMPILE_CACHE_VOLUME = "compile-cache"
COMPILE_CACHE_GI = 100                     # what the compile-cache PV/PVC advertise (EFS is elastic)
# The pre-pull DaemonSet's one running container: the pause image kubelet itself uses (registry.k8s.io/pause,
# 3.10 as pinned by Kubernetes 1.34's kubeadm constants), multi-arch.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
PREPULL_COMPONENT = "image-prepull"         # kimi_k3.critical_path charges image_pull to it
PREFETCH_COMPONENT = "weights-prefetch"     # kimi_k3.critical_path charges the node-local copy to it
PREFETCH_SCRIPT = Path(__file__).with_name("weights_prefetch.py")
PREFETCH_PORT = 8080                        # peers copy each other's files over the pod network
REMOTE_CACHE_VOLUME = "model-cache-remote"  # the bucket (model-cache PVC) beside a node-local copy
GRAPH_LABEL = "kimi-k3.io/graph"           # on every pod of the graph: what the graph-ready Job watches
WATCH_SCRIPT = Path(__file__).with_name("graph_watch.py")


ARCH_LABEL = "kubernetes.io/arch"
ZONE_LABEL = "topology.kubernetes.io/zone"  # well-known label; kubelet/cloud provider sets it on every EKS node


def compute_domain_name(graph: ServingGraph, role: Role) -> str:
    return f"{graph.name}-{role.compute_domain}"


def channel_template_name(graph: ServingGraph, role: Role) -> str:
    return f"{compute_domain_name(graph, role)}-channel"


def _arch_requirement(arches) -> Obj:
    """Required node affinity: only nodes of an architecture the pod's image is built for (recipes/images.yaml)."""
    return {"key": ARCH_LABEL, "operator": "In", "values": sorted(arches)}


def _node_affinity(*expressions: Obj) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(expressions)}]}}}


def _gpu_node_daemonset(graph: ServingGraph, name: str, component: str, node_selector: dict[str, str] | None,
                        pod: Obj, config_maps: tuple[Obj, ...] = (), **meta: Any) -> Obj:
    """A DaemonSet on the stack's GPU nodes (the given node selector, else the workers' GPU-product affinity),
    tolerating the GPU taint; `pod` holds the rest of its pod spec, `config_maps` what its pods mount."""
    labels = {**PART_OF, "app.kubernetes.io/component": component}
    selector = {"app.kubernetes.io/name": name}
    placement: Obj = ({"nodeSelector": dict(node_selector)} if node_selector else
                      {"affinity": _node_affinity({"key": "nvidia.com/gpu.product", "operator": "In",
                                                   "values": [graph.platform.gpu_product_label]})})
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": _meta(graph, name, **meta) | {"labels": labels},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": (with_config_checksums({"labels": {**labels, **selector}}, *config_maps) if config_maps
                             else {"labels": {**labels, **selector}}),
                "spec": {**placement,
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         **pod},
            },
        },
    }


def _meta(graph: ServingGraph, name: str, **extra: Any) -> Obj:
    return {"name": name, "namespace": graph.namespace, "labels": dict(PART_OF), **extra}


def _env(pairs) -> list[Obj]:
    return [{"name": k, "value": v} for k, v in pairs]


def runtime_security_context() -> Obj:
    """Containers of the Dynamo runtime image (frontend, workers, fabric preflight): its own USER (uid 1000, gid 0:
    recipes/images.yaml runtime_user) written out, so the uid the shared compile cache is prepared for is the one
    that runs. No capabilities: added ones never reach a non-root process (no ambient set; kubernetes/kubernetes
    #56374), which is why IPC_LOCK/SYS_RESOURCE are gone; locked memory comes from the runtime's RLIMIT_MEMLOCK."""
    uid, gid = runtime_user()
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
            "runAsUser": uid, "runAsGroup": gid}


CONFIG_CHECKSUM_PREFIX = "checksum.kimi-k3.io/"


def config_checksum(config_map: Obj) -> str:
    """sha256 of a ConfigMap's data: the pod-template annotation that rolls the pods mounting it when it changes."""
    return hashlib.sha256(json.dumps(config_map.get("data") or {}, sort_keys=True).encode()).hexdigest()


def with_config_checksums(template_metadata: Obj, *config_maps: Obj) -> Obj:
    """`template_metadata` plus one `checksum.kimi-k3.io/<configmap>` annotation per ConfigMap its pods mount: a changed
    script changes the pod template, so a DaemonSet rolls and a Job is replaced (ConfigMap volumes are not restarts)."""
    notes = dict(template_metadata.get("annotations") or {})
    notes.update({f"{CONFIG_CHECKSUM_PREFIX}{c['metadata']['name']}": config_checksum(c) for c in config_maps})
    return {**template_metadata, "annotations": dict(sorted(notes.items()))}


def namespace(graph: ServingGraph) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": graph.namespace, "labels": dict(PART_OF)}}


def hf_token_secret(graph: ServingGraph, token: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(graph, NAMES["secret"]),
            "type": "Opaque", "stringData": {"HF_TOKEN": token}}


def model_cache_pvc(graph: ServingGraph, storage_class: str, size_gi: int) -> Obj:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": _meta(graph, NAMES["pvc"]),
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": f"{size_gi}Gi"}}},
    }


def verify_script_config_map(graph: ServingGraph) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(graph, NAMES["verify"]),
            "data": {VERIFY_SCRIPT.name: VERIFY_SCRIPT.read_text()}}


def download_job(graph: ServingGraph, download_image: str, hub_version: str, fetch_from_hub: bool = True,
                 node_selector: dict[str, str] | None = None, wait_seconds: int = 0) -> Obj:
    """Download (unless the weights were pre-staged or are fetched outside the cluster), then verify every shard.
    `wait_seconds`: the weights arrive from elsewhere (the S3 fetchers); poll that long for them to be complete, on
    a read-only volume (no marker file written)."""
    n = NAMES
    pairs = [("MODEL_REPO", graph.model_repo), ("MODEL_REVISION", graph.model_revision),
             ("MODEL_PATH", graph.model_path),
             ("HF_HOME", "/tmp/hf-home" if wait_seconds else f"{graph.cache_mount_path}/.hf-home"),
             ("HF_XET_HIGH_PERFORMANCE", "1"),          # hf_xet's parallel fast-transfer mode
             ("PYTHONPATH", TOOLS_DIR)]
    if wait_seconds:
        # The fetchers' manifests and failure records, polled on the read-only mount (kimi_k3/verify_checkpoint.py).
        pairs += [("VERIFY_MODE", "manifest"), ("VERIFY_WAIT_SECONDS", str(wait_seconds)),
                  ("VERIFY_WRITE_MARKER", "0")]
    else:
        pairs += [("VERIFY_MODE", "hash")]         # hashes every file, writes the manifest the node-local copy reads
    env = _env(pairs)
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": n["secret"], "key": "HF_TOKEN"}}})
    # Root, written out (the python image's USER): a filesystem model cache (kind efs/fsx-lustre) is root:root 0755.
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0, "runAsGroup": 0,
                "seccompProfile": {"type": "RuntimeDefault"}}
    mounts = [{"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, **({"readOnly": True} if wait_seconds else {})},
              {"name": "tools", "mountPath": TOOLS_DIR}]
    script = f"set -eu\npip install --no-cache-dir --target {TOOLS_DIR} 'huggingface_hub[hf_xet]=={hub_version}'\n"
    if fetch_from_hub:
        # hf download skips complete files and resumes partial ones, so a retried pod continues.
        script += f'{TOOLS_DIR}/bin/hf download "$MODEL_REPO" --revision "$MODEL_REVISION" --local-dir "$MODEL_PATH"\n'
    script += f"exec python3 /scripts/{VERIFY_SCRIPT.name}\n"
    # Waiting for weights fetched elsewhere, the verify step gives up first and names what is missing.
    deadline = graph.download_timeout_seconds + (VERIFY_REPORT_SECONDS if wait_seconds else 0)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        # No pulumi.com/waitFor: it replaces pulumi-kubernetes' Job await, which fails `up` as soon as the Job
        # is Failed (BackoffLimitExceeded / DeadlineExceeded) with its pods' errors; waitFor only succeeds or
        # times out. The provider's timeout sits past the Job's own deadline so the Job names the reason.
        "metadata": _meta(graph, n["job"], annotations={
            "pulumi.com/timeoutSeconds": str(deadline + AWAIT_GRACE_SECONDS),
        }),
        "spec": {
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "activeDeadlineSeconds": deadline,
            # A drained or preempted node is no failure of the download: it does not use up a retry.
            "podFailurePolicy": {"rules": [{"action": "Ignore",
                                           "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
            "template": {
                "metadata": with_config_checksums({"labels": {**PART_OF, "app.kubernetes.io/component": "model-download"}},
                                                  verify_script_config_map(graph)),
                "spec": {
                    "restartPolicy": "Never",
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": _node_affinity(_arch_requirement(graph.download_arch)),
                    # One container, so the pod status Pulumi reports carries the failing step's log tail
                    # (its checker reads containerStatuses, not initContainerStatuses).
                    "containers": [{
                        "name": "download", "image": download_image, "command": ["sh", "-c"], "args": [script],
                        "env": env, "securityContext": hardened,
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "volumeMounts": mounts + [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                    }],
                    "volumes": [
                        {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": n["pvc"]}},
                        {"name": "tools", "emptyDir": {}},
                        {"name": "scripts", "configMap": {"name": n["verify"]}},
                    ],
                },
            },
        },
    }


def smoke_script_config_map(graph: ServingGraph) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(graph, NAMES["smoke"]),
            "data": {SMOKE_SCRIPT.name: SMOKE_SCRIPT.read_text()}}


def frontend_url(graph: ServingGraph) -> str:
    """The frontend Service, as the in-cluster Jobs (smoke test, benchmark) reach it."""
    return f"http://{graph.frontend_service}.{graph.namespace}.svc.cluster.local:{graph.frontend.http_port}"


def smoke_block_size(graph: ServingGraph) -> int:
    """The largest KV block any worker runs (its --block-size, as vLLM runs it): the smoke test's cache-hit probe
    spans whole blocks of it, in the Job and in the rehearsal alike."""
    return max(int(role_flag(r, "--block-size")) for r in graph.roles)


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
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _meta(graph, NAMES["smoke"], annotations={
            "pulumi.com/timeoutSeconds": str(SMOKE_DEADLINE_SECONDS + 60)}),
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": SMOKE_DEADLINE_SECONDS,
            "template": {
                "metadata": with_config_checksums({"labels": {**PART_OF, "app.kubernetes.io/component": "smoke-test"},
                                                   "annotations": {"kimi-k3.io/graph-sha256": graph_hash}},
                                                  smoke_script_config_map(graph)),
                "spec": {
                    "restartPolicy": "Never",
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": _node_affinity(_arch_requirement(graph.download_arch)),
                    "containers": [{
                        "name": "smoke", "image": image,
                        "command": ["python3", f"/smoke/{SMOKE_SCRIPT.name}"],
                        "args": ["--url", url, "--served-model-name", graph.served_model_name, "--max-model-len", str(max_len),
                                 "--kv-block-size", str(block), "--cache-probe-tokens", str(smoke.probe_tokens(block)),
                                 "--real-model", "--wait-seconds", str(SMOKE_WAIT_SECONDS),
                                 "--termination-log", "/dev/termination-log"],
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "runAsNonRoot": True, "runAsUser": 65534,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumeMounts": [{"name": "smoke", "mountPath": "/smoke", "readOnly": True}],
                    }],
                    "volumes": [{"name": "smoke", "configMap": {"name": NAMES["smoke"]}}],
                },
            },
        },
    }


def benchmark_plan(graph: ServingGraph, w: workload.Workload) -> Obj:
    """What the benchmark Job runs: the rehearsal's workload (workload.profile_args) against the frontend Service,
    tokenized by the model's own tokenizer from the cache (remote code, as the graph's --trust-remote-code)."""
    return {"run_deadline_seconds": w.run_deadline_seconds(), "runs": {
        kind: workload.profile_args(kind, w, model=graph.served_model_name, url=frontend_url(graph),
                                    tokenizer=graph.model_path, artifact_dir=f"{BENCHMARK_RESULTS}/{kind}",
                                    extra=["--tokenizer-trust-remote-code"])
        for kind in w.runs}}


def benchmark_config_map(graph: ServingGraph, w: workload.Workload) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(graph, NAMES["benchmark"]),
            "data": {WORKLOAD_SCRIPT.name: WORKLOAD_SCRIPT.read_text(),
                     "plan.json": json.dumps(benchmark_plan(graph, w), indent=1) + "\n"}}


def benchmark_job(graph: ServingGraph, w: workload.Workload, image: str,
                  node_selector: dict[str, str] | None = None) -> Obj:
    """AIPerf against the frontend Service, after the smoke test: the rehearsal's runs, one after the other, in
    AIPerf's own image. No API access (no service account token), non-root, read-only root and model cache,
    Guaranteed resources; each run's summary stays in the Job's log (`kubectl logs job/kimi-k3-benchmark`)."""
    deadline = int(BENCHMARK_START_SECONDS + len(w.runs) * w.run_deadline_seconds())
    # A changed graph or workload changes the pod template, so the Job is replaced and measures again.
    graph_hash = hashlib.sha256(json.dumps(graph_deployment(graph), sort_keys=True).encode()).hexdigest()[:16]
    plan_hash = hashlib.sha256(json.dumps(benchmark_plan(graph, w), sort_keys=True).encode()).hexdigest()[:16]
    tmp = {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}
    results = {"name": "results", "emptyDir": {"sizeLimit": "1Gi"}}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _meta(graph, NAMES["benchmark"], annotations={
            "pulumi.com/timeoutSeconds": str(deadline + 60)}),
        "spec": {
            "backoffLimit": 0,                 # a second try would measure a cache the first one warmed
            "activeDeadlineSeconds": deadline,
            "template": {
                "metadata": with_config_checksums({"labels": {**PART_OF, "app.kubernetes.io/component": "benchmark"},
                                                   "annotations": {"kimi-k3.io/graph-sha256": graph_hash,
                                                                   "kimi-k3.io/plan-sha256": plan_hash}},
                                                  benchmark_config_map(graph, w)),
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,   # AIPerf profile only talks to the frontend
                    "enableServiceLinks": False,
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "securityContext": {"runAsNonRoot": True, "runAsUser": BENCHMARK_UID,
                                        "runAsGroup": BENCHMARK_UID, "fsGroup": BENCHMARK_UID,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "aiperf", "image": image,
                        "command": ["python", f"{BENCHMARK_DIR}/{WORKLOAD_SCRIPT.name}"],
                        "args": ["--plan", f"{BENCHMARK_DIR}/plan.json", "--termination-log", "/dev/termination-log"],
                        # AIPerf's datasets and IPC sockets go to TMPDIR; remote tokenizer code to HF_HOME.
                        "env": _env([("TMPDIR", "/tmp"), ("HOME", "/tmp"), ("HF_HOME", "/tmp/hf-home"),
                                     ("HF_HUB_DISABLE_TELEMETRY", "1"), ("DO_NOT_TRACK", "1"),
                                     ("PYTHONUNBUFFERED", "1")]),
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "resources": BENCHMARK_RESOURCES,
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "volumeMounts": [
                            {"name": "benchmark", "mountPath": BENCHMARK_DIR, "readOnly": True},
                            {"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True},
                            {"name": "tmp", "mountPath": "/tmp"},
                            {"name": "results", "mountPath": BENCHMARK_RESULTS},
                        ],
                    }],
                    "volumes": [
                        {"name": "benchmark", "configMap": {"name": NAMES["benchmark"]}},
                        {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": NAMES["pvc"], "readOnly": True}},
                        tmp, results,
                    ],
                },
            },
        },
    }


def compute_domain(graph: ServingGraph, key: str) -> Obj:
    """The ComputeDomain every role with `compute_domain == key` claims (one per graph when KV moves over NVLink)."""
    role = next(r for r in graph.roles if r.compute_domain == key)
    return {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
        "metadata": _meta(graph, compute_domain_name(graph, role)),
        "spec": {"numNodes": 0,  # 0 = IMEX daemons join on demand (driver >= 25.8 DNS-name mode)
                 "channel": {"allocationMode": "Single",
                             "resourceClaimTemplate": {"name": channel_template_name(graph, role)}}},
    }


def _resources(gpus: int | None, cpu: str | None, memory: str | None, efa: int = 0) -> Obj:
    requests: Obj = {}
    limits: Obj = {}
    if gpus:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(gpus)
    if efa:  # KV transfer over EFA (NIXL LIBFABRIC): the node's EFA devices, from the EFA device plugin
        requests[EFA_RESOURCE] = limits[EFA_RESOURCE] = str(efa)
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def graph_watch_objects(graph: ServingGraph, image: str, node_selector: dict[str, str] | None = None) -> list[Obj]:
    """ServiceAccount, Role (get this graph, list pods), RoleBinding, script and the graph-ready Job, which
    `pulumi up` awaits with pulumi-kubernetes' Job await: Ready -> done; a pod that cannot run -> failed."""
    n = NAMES
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(graph, n["watch"])}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(graph, n["watch"]),
            "rules": [{"apiGroups": ["nvidia.com"], "resources": ["dynamographdeployments"],
                       "resourceNames": [graph.name], "verbs": ["get"]},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": _meta(graph, n["watch"]),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": n["watch"]},
               "subjects": [{"kind": "ServiceAccount", "name": n["watch"], "namespace": graph.namespace}]}
    script = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(graph, n["watch"]),
              "data": {WATCH_SCRIPT.name: WATCH_SCRIPT.read_text()}}
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _meta(graph, n["ready"], annotations={
            "pulumi.com/timeoutSeconds": str(graph.ready_timeout_seconds + AWAIT_GRACE_SECONDS)}),
        "spec": {
            "backoffLimit": 0,                       # the script already waited; its verdict is final
            "activeDeadlineSeconds": graph.ready_timeout_seconds,
            "podFailurePolicy": {"rules": [{"action": "Ignore",
                                           "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
            "template": {
                # A changed graph changes this Job's template, so Pulumi replaces the Job and `up` waits again.
                "metadata": with_config_checksums({"labels": {**PART_OF, "app.kubernetes.io/component": "graph-ready"},
                                                   "annotations": {"kimi-k3.io/graph-spec-sha256": hashlib.sha256(json.dumps(
                                                       graph_deployment(graph)["spec"], sort_keys=True).encode()).hexdigest()}},
                                                  script),
                "spec": {
                    "restartPolicy": "Never", "serviceAccountName": n["watch"],
                    **({"nodeSelector": dict(node_selector)} if node_selector else {}),
                    "affinity": _node_affinity(_arch_requirement(graph.download_arch)),
                    "containers": [{
                        "name": "watch", "image": image,
                        "command": ["python3", f"/scripts/{WATCH_SCRIPT.name}"],
                        "env": _env([("GRAPH_NAME", graph.name), ("GRAPH_NAMESPACE", graph.namespace),
                                     ("POD_SELECTOR", f"{GRAPH_LABEL}={graph.name}"),
                                     ("DEADLINE_SECONDS", str(graph.ready_timeout_seconds))]),
                        "securityContext": hardened,
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                    }],
                    "volumes": [{"name": "scripts", "configMap": {"name": n["watch"]}}],
                },
            },
        },
    }
    return [sa, role, binding, script, job]


def _frontend_placement(graph: ServingGraph) -> Obj:
    """The frontend (HTTP, tokenizer, KV router) in the workers' zone: every request, streamed token and KV event
    passes between them, and in eks the GPUs sit in a Local Zone whose only nodes are the GPU nodes. A required pod
    affinity on the zone to the graph's workers (any cluster), the zone itself where it is known (eks), the GPU taint
    tolerated (it runs on a GPU node there, beside a worker, on its small CPU/memory request)."""
    fe = graph.frontend
    node_terms = [_arch_requirement(fe.arch)] + (
        [{"key": ZONE_LABEL, "operator": "In", "values": [fe.zone]}] if fe.zone else [])
    same_zone = [{"labelSelector": {"matchLabels": {GRAPH_LABEL: graph.name}, "matchExpressions": [
        {"key": ROLE_LABEL, "operator": "In", "values": sorted(r.key for r in graph.roles)}]},
        "topologyKey": ZONE_LABEL}]
    return {"affinity": {**_node_affinity(*node_terms),
                         "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": same_zone}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def _frontend_component(graph: ServingGraph) -> Obj:
    fe = graph.frontend
    container = {
        "name": "main", "image": graph.image,
        "command": ["python3", "-m", "dynamo.frontend"], "args": list(fe.args), "env": _env(fe.env),
        "securityContext": runtime_security_context(),
    }
    # The frontend loads tokenizer and config from the local paths workers register (HF_HUB_OFFLINE=1): it
    # mounts the same cache, read-only, at the same path.
    container["volumeMounts"] = [{"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True}]
    resources = _resources(None, fe.cpu, fe.memory)
    if resources:
        container["resources"] = resources
    # Labels our PodMonitors select on (kimi_k3/monitoring.py), not the operator's (#10596).
    component = {"name": fe.component, "type": "frontend", "replicas": fe.replicas,
                 "podTemplate": {"metadata": {"labels": {GRAPH_LABEL: graph.name, **role_labels("frontend")}}, "spec": {
                     **_frontend_placement(graph),
                     "volumes": [{"name": CACHE_VOLUME, "persistentVolumeClaim": {
                         "claimName": NAMES["pvc"], "readOnly": True}}],
                     "containers": [container]}}}
    if graph.runtime_version:
        component["runtimeVersionOverride"] = graph.runtime_version
    return component


def _gpu_group_placement(graph: ServingGraph, role: Role, group_labels: dict[str, str]) -> Obj:
    """Where one TP group of `role` runs: its GPU product and CPU architecture, one NVLink clique for the pods carrying
    `group_labels`, the GPU taint tolerated, the role's ComputeDomain channel. Workers and their fabric preflight
    share it, so the preflight tests the placement the workers get."""
    gpu_affinity = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [graph.platform.gpu_product_label]},
        _arch_requirement([kube_arch(graph.platform.arch)])]}]}
    # Nothing in the scheduler keeps a TP group inside one NVLink domain: require a shared clique.
    same_clique = [{"labelSelector": {"matchLabels": group_labels}, "topologyKey": CLIQUE_KEY}]
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": gpu_affinity},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": same_clique},
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resourceClaims": [{"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template_name(graph, role)}],
    }


def _worker_component(graph: ServingGraph, role: Role) -> Obj:
    container = {
        "name": "main", "image": graph.image,
        "command": ["python3", "-m", "dynamo.vllm"], "args": list(role.args), "env": _env(role.env),
        "resources": {**_resources(role.gpus_per_node, role.cpu, role.memory, role.efa_devices),
                      "claims": [{"name": CHANNEL_CLAIM}]},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": graph.cache_mount_path, "readOnly": True}]
        + ([{"name": REMOTE_CACHE_VOLUME, "mountPath": remote_cache_path(graph), "readOnly": True}]
           if graph.node_local_weights else [])
        + ([{"name": COMPILE_CACHE_VOLUME, "mountPath": compile_cache_spec()["mount_path"],
             "subPath": role.compile_cache_key}]   # kubelet creates it on first use, through the access point (as 1000:0)
           if graph.compile_cache else []),
        "startupProbe": {
            "httpGet": {"path": "/health", "port": HEALTH_PORT},
            "periodSeconds": PROBE_PERIOD_SECONDS, "timeoutSeconds": 10,
            "failureThreshold": math.ceil(graph.startup_probe_seconds / PROBE_PERIOD_SECONDS),
        },
        "securityContext": runtime_security_context(),
    }
    pod_meta: Obj = {"labels": {GRAPH_LABEL: graph.name, NVLINK_GROUP_LABEL: role.nvlink_group,
                                **role_labels(role.key)}}
    if role.pod_annotations:
        pod_meta["annotations"] = dict(role.pod_annotations)
    component = {
        "name": role.component, "type": role.type, "replicas": role.replicas,
        "multinode": {"nodeCount": role.nodes_per_replica},
        "sharedMemorySize": role.shared_memory_size,
        "podTemplate": {
            "metadata": pod_meta,
            "spec": {
                **_gpu_group_placement(graph, role, {NVLINK_GROUP_LABEL: role.nvlink_group}),
                "terminationGracePeriodSeconds": 60,
                "volumes": _weights_volumes(graph)
                + ([{"name": COMPILE_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": NAMES["compile_cache"]}}]
                   if graph.compile_cache else []),
                "containers": [container],
            },
        },
    }
    if graph.runtime_version:
        component["runtimeVersionOverride"] = graph.runtime_version
    return component


def _weights_volumes(graph: ServingGraph) -> list[Obj]:
    """The workers' model cache: the bucket's read-only PVC, or (node-local weights) this node's copy on the
    instance-store NVMe, read-only, at the same path, with the bucket beside it (files not yet copied are links
    into it). Type Directory: a worker never starts on a node whose prefetch pod has not laid the tree out."""
    pvc = {"persistentVolumeClaim": {"claimName": NAMES["pvc"], "readOnly": True}}
    if not graph.node_local_weights:
        return [{"name": CACHE_VOLUME, **pvc}]
    return [{"name": CACHE_VOLUME, "hostPath": {"path": node_local_dir(graph), "type": "Directory"}},
            {"name": REMOTE_CACHE_VOLUME, **pvc}]


def remote_cache_path(graph: ServingGraph) -> str:
    return f"{graph.cache_mount_path}-remote"


def node_local_root() -> str:
    """Host directory of the node-local copies, on the GPU nodes' instance-store RAID0 (recipes/storage.yaml)."""
    return recipe_file("storage.yaml")["nvme"]["host_path"]


def node_local_fs_path() -> str:
    """Where the node-local root sits within the instance-store array's filesystem (the prefetch's FS_PATH): the
    host path below the array's mount point. A pod whose hostPath resolves elsewhere (no array) copies nothing."""
    nvme = recipe_file("storage.yaml")["nvme"]
    array, host = nvme["array_mount_point"].rstrip("/"), nvme["host_path"]
    if not host.startswith(array + "/"):
        raise ValueError(f"recipes/storage.yaml nvme.host_path = {host}: must be under array_mount_point {array}")
    return host[len(array):]


def node_local_dir(graph: ServingGraph) -> str:
    """One directory per revision; the workers mount it at the model-cache path."""
    return f"{node_local_root()}/{graph.model_revision}"


def model_dir_name(graph: ServingGraph) -> str:
    """The checkpoint's directory under the model-cache mount (<repo>, or <repo>@<revision>)."""
    return graph.model_path[len(graph.cache_mount_path) + 1:]


def weights_prefetch_objects(graph: ServingGraph, image: str, node_selector: dict[str, str] | None = None) -> list[Obj]:
    """ConfigMap (kimi_k3/weights_prefetch.py), the headless Service its peers find each other by, and the DaemonSet
    that copies the verified checkpoint onto every GPU node's NVMe. A pod is Ready when its node holds the whole
    checkpoint (or cannot: then its workers read the bucket through links), so the graph that waits for the
    DaemonSet starts on local weights."""
    n = NAMES
    remote = remote_cache_path(graph)
    local_mount = "/node-local"
    script = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(graph, f"{n['prefetch']}-script"),
              "data": {PREFETCH_SCRIPT.name: PREFETCH_SCRIPT.read_text()}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": _meta(graph, n["peers"]),
               # Peers are listed before they are Ready: Ready means "done", and they copy from each other first.
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                        "selector": {"app.kubernetes.io/name": n["prefetch"]},  # the DaemonSet's pods
                        "ports": [{"name": "peer", "port": PREFETCH_PORT}]}}
    env = _env([("SOURCE", f"{remote}/{model_dir_name(graph)}"), ("LOCAL_ROOT", local_mount),
                ("MODEL_REPO", model_dir_name(graph)), ("MODEL_REVISION", graph.model_revision),
                ("PEERS_DNS", f"{n['peers']}.{graph.namespace}.svc.cluster.local"),
                ("EXPECTED_PEERS", str(graph.nodes)), ("PORT", str(PREFETCH_PORT)), ("THREADS", "16"),
                # Bounds of every wait on a peer (kimi_k3/weights_prefetch.py): past them a file comes from the bucket.
                ("PEER_JOIN_SECONDS", "60"), ("PEER_WAIT_SECONDS", "1800"), ("STALL_SECONDS", "120"),
                ("FS_PATH", node_local_fs_path()), ("PYTHONUNBUFFERED", "1")])
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    container = {
        "name": "prefetch", "image": image, "command": ["python3", f"/scripts/{PREFETCH_SCRIPT.name}"], "env": env,
        "ports": [{"name": "peer", "containerPort": PREFETCH_PORT}],
        "readinessProbe": {"exec": {"command": ["test", "-f", f"{local_mount}/{graph.model_revision}/{PREFETCH_READY_MARKER}"]},
                           "periodSeconds": 10},
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "16Gi"}},
        # Root (uid 0, written out: the download image's USER) owns the host directory kubelet creates (a hostPath
        # ignores fsGroup); no capability beyond that, and it writes nowhere but that directory.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True, "runAsUser": 0, "runAsGroup": 0,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True},
                         {"name": REMOTE_CACHE_VOLUME, "mountPath": remote, "readOnly": True},
                         {"name": "node-local", "mountPath": local_mount}],
    }
    # pulumi-kubernetes awaits the rollout (every pod Ready = every node holds the checkpoint); the copy may
    # take longer than its default timeout.
    daemonset = _gpu_node_daemonset(
        graph, n["prefetch"], PREFETCH_COMPONENT, node_selector,
        {"containers": [container], "terminationGracePeriodSeconds": 5,
         "volumes": [{"name": "scripts", "configMap": {"name": f"{n['prefetch']}-script"}},
                     {"name": REMOTE_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": n["pvc"], "readOnly": True}},
                     {"name": "node-local", "hostPath": {"path": node_local_root(), "type": "DirectoryOrCreate"}}]},
        config_maps=(script,), annotations={"pulumi.com/timeoutSeconds": str(graph.download_timeout_seconds)})
    # A revision change replaces every pod at once: replaced one by one (the default, maxUnavailable 1), the k-th
    # new pod finds its preferred readers still old (404) and reads (N-k+1)/N of the checkpoint from the bucket,
    # (N+1)/2 checkpoints over the Local Zone link in all. Old workers keep the old copy (weights_prefetch.make_room).
    daemonset["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    return [script, service, daemonset]


def weights_peers_network_policy(graph: ServingGraph) -> Obj:
    """Only the weights-prefetch DaemonSet's own pods reach its peer port (the peer server authenticates no one).
    Enforced on EKS by the VPC CNI's network policy agent (vpc-cni add-on `enableNetworkPolicy`, components/aws)."""
    peers = {"matchLabels": {"app.kubernetes.io/name": NAMES["prefetch"]}}   # the DaemonSet's selector
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(graph, NAMES["peers"]),
            "spec": {"podSelector": peers, "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": peers}],
                                  "ports": [{"protocol": "TCP", "port": PREFETCH_PORT}]}]}}


def graph_deployment(graph: ServingGraph) -> Obj:
    return {
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
        "metadata": _meta(graph, graph.name, annotations={
            # The graph-ready Job waits instead: a waitFor condition could only succeed or time out (4 h), the
            # Job fails `up` within minutes naming the pod that cannot run (kimi_k3/graph_watch.py).
            "pulumi.com/skipAwait": "true",
            "kimi-k3.io/recipe": graph.recipe,
            "kimi-k3.io/gpus": str(graph.gpus),
            "kimi-k3.io/nodes": str(graph.nodes),
        }),
        "spec": {"backendFramework": "vllm", "components": _components(graph)},
    }


def _components(graph: ServingGraph) -> list[Obj]:
    workers = [_worker_component(graph, r) for r in graph.roles]
    if graph.autoscaling is None:
        return [_frontend_component(graph)] + workers
    from . import autoscaling
    from .images import image_facts

    # The planner runs beside the controllers (eks: the system nodes), on an architecture its image is built for.
    built = image_facts(graph.autoscaling.image).arch
    arches = [a for a in graph.side_arch if built is None or a in built]
    planner = autoscaling.planner_component(graph, {GRAPH_LABEL: graph.name, **role_labels("planner")},
                                            _node_affinity(_arch_requirement(arches)))
    # The planner last: the workers keep their positions in spec.components (a diff shows only what changed).
    return [_frontend_component(graph)] + [autoscaling.hand_over_replicas(w) for w in workers] + [planner]


# ------------------------------------------------------------------------------------------ fabric preflight
PREFLIGHT_SCRIPT = Path(__file__).with_name("fabric_preflight.py")
PREFLIGHT_LABEL = "kimi-k3.io/preflight"
PREFLIGHT_PORT = 29500                    # torch.distributed rendezvous on the index-0 pod
# systemd puts each system service in its own cgroup under system.slice (cgroup v2, AL2023's default hierarchy:
# systemd.special(7) "system.slice"); the preflight mounts it read-only where fabric_preflight.py looks.
HOST_SYSTEM_SLICE = "/sys/fs/cgroup/system.slice"
PREFLIGHT_HOST_SERVICES = "/host/system.slice"


def preflight_name(graph: ServingGraph, role: Role) -> str:
    return f"{graph.name}-{role.key}-preflight"


def preflight_script_config_map(graph: ServingGraph) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(graph, f"{graph.name}-preflight-script"),
            "data": {PREFLIGHT_SCRIPT.name: PREFLIGHT_SCRIPT.read_text()}}


def preflight_service(graph: ServingGraph, role: Role) -> Obj:
    """Headless Service: stable DNS for the index-0 pod (<job>-0.<service>) as rendezvous."""
    name = preflight_name(graph, role)
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(graph, name),
            "spec": {"clusterIP": "None", "selector": {PREFLIGHT_LABEL: name},
                     "ports": [{"name": "rendezvous", "port": PREFLIGHT_PORT}]}}


def preflight_job(graph: ServingGraph, role: Role, min_bus_bandwidth_gbps: float, timeout_seconds: int) -> Obj:
    """One pod per node of one TP group of `role`, placed as the role's workers are (same GPUs, same clique
    pinning, same ComputeDomain channel), running kimi_k3/fabric_preflight.py. The graph waits for it."""
    name = preflight_name(graph, role)
    env = _env([("NNODES", str(role.nodes_per_replica)), ("GPUS_PER_NODE", str(role.gpus_per_node)),
                ("MASTER_ADDR", f"{name}-0.{name}"), ("MASTER_PORT", str(PREFLIGHT_PORT)),
                ("MIN_BUS_BANDWIDTH_GBPS", f"{min_bus_bandwidth_gbps:g}"),
                ("COMPUTE_DOMAIN", compute_domain_name(graph, role)), ("HOST_SERVICES", PREFLIGHT_HOST_SERVICES)])
    env.append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    container = {
        "name": "preflight", "image": graph.image, "command": ["python3", f"/scripts/{PREFLIGHT_SCRIPT.name}"],
        "env": env, "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {**_resources(role.gpus_per_node, None, None, role.efa_devices),
                      "claims": [{"name": CHANNEL_CLAIM}]},
        "volumeMounts": [{"name": "scripts", "mountPath": "/scripts", "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "host-services", "mountPath": PREFLIGHT_HOST_SERVICES, "readOnly": True}],
        "securityContext": runtime_security_context(),
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        # pulumi-kubernetes' own Job await (no waitFor, which could only succeed or time out): a failed check
        # fails `up` at once with the pod's log tail; the deadline names a check that never finished.
        "metadata": _meta(graph, name, annotations={
            "pulumi.com/timeoutSeconds": str(timeout_seconds + AWAIT_GRACE_SECONDS)}),
        "spec": {
            "completionMode": "Indexed", "completions": role.nodes_per_replica,
            "parallelism": role.nodes_per_replica, "backoffLimit": 0, "activeDeadlineSeconds": timeout_seconds,
            "template": {
                "metadata": with_config_checksums({"labels": {**PART_OF, PREFLIGHT_LABEL: name,
                                                              "app.kubernetes.io/component": "fabric-preflight"}},
                                                  preflight_script_config_map(graph)),
                "spec": {
                    "restartPolicy": "Never", "subdomain": name,
                    **_gpu_group_placement(graph, role, {PREFLIGHT_LABEL: name}),
                    "containers": [container],
                    # Step 1 reads the host's systemd service cgroups (read-only) instead of every host process
                    # (hostPID): a running nvidia-imex.service is a populated system.slice/nvidia-imex.service.
                    "volumes": [{"name": "scripts", "configMap": {"name": f"{graph.name}-preflight-script"}},
                                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                                {"name": "host-services", "hostPath": {"path": HOST_SYSTEM_SLICE, "type": "Directory"}}],
                },
            },
        },
    }


def compile_cache_pvc(namespace: str) -> Obj:
    """The shared compile-cache claim (statically bound to the stack's compile-cache PV)."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": NAMES["compile_cache"], "namespace": namespace, "labels": dict(PART_OF)},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "volumeName": NAMES["compile_cache"], "resources": {"requests": {"storage": f"{COMPILE_CACHE_GI}Gi"}}},
    }


def image_prepull(graph: ServingGraph, node_selector: dict[str, str] | None = None) -> Obj:
    """A DaemonSet on the GPU nodes whose init container is the runtime image (kubelet pulls it, the container exits at
    once), so the workers start with the ~20 GB image in place while the nodes would otherwise wait for weights.
    Default placement: the workers' own GPU affinity."""
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    small = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}
    return _gpu_node_daemonset(
        graph, NAMES["prepull"], PREPULL_COMPONENT, node_selector,
        {"initContainers": [{"name": "pull", "image": graph.image, "command": ["true"],
                             "resources": small, "securityContext": hardened}],
         "containers": [{"name": "pause", "image": PAUSE_IMAGE, "resources": small, "securityContext": hardened}],
         "terminationGracePeriodSeconds": 1})
