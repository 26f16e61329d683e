"""Critical path of a deployment, from the rendered dependency graph (resources.json) and duration estimates.

Edges: a resource starts when everything in its `dependsOn` (and its provider) has finished; as in the engine,
a component's own dependencies do not hold back its children (components pass them down explicitly). A
component finishes when its last child does. Durations: recipes/facts/durations.yaml (each with its source) overridden by `kimi-k3:estimates`; the download
and worker load come from kimi_k3.sizing.cost (one implementation of bytes / bandwidth).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Optional

from kimi_k3.config.stack import StackConfig
from kimi_k3.facts import model
from kimi_k3.graph.durations import Estimates, _defaults, estimates
from kimi_k3.names import PREFETCH_COMPONENT, PREPULL_COMPONENT, is_fetcher

HELM_KEYS = {
    "gpu-operator": "helm_gpu_operator",
    "aws-efa-k8s-device-plugin": "helm_efa_device_plugin",
    "dra-driver-nvidia-gpu": "helm_dra_driver",
    "dynamo-platform": "helm_dynamo_platform",
}
TYPE_KEYS = {
    "aws:eks/cluster:Cluster": "eks_cluster",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "fsx_lustre",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "fsx_data_repository",
    "aws:efs/fileSystem:FileSystem": "efs",
    "aws:ec2/natGateway:NatGateway": "nat_gateway",
    "aws:eks/addon:Addon": "eks_addon",
}


def duration(r: dict[str, Any], est: Estimates) -> tuple[float, str]:
    """(seconds, what the number is) of one registered resource."""
    t, inputs = r["type"], r.get("inputs", {})
    if t.startswith("kimi-k3:") or t.startswith("pulumi:providers:"):
        return 0.0, "component"
    if t == "aws:eks/nodeGroup:NodeGroup":
        key = "gpu_node_group" if inputs.get("amiType", "").endswith("NVIDIA") else "system_node_group"
        return est.of(key), key
    if t in TYPE_KEYS:
        return est.of(TYPE_KEYS[t]), TYPE_KEYS[t]
    if t == "aws:ec2/instance:Instance" and is_fetcher(r):
        share = (model.checkpoint_bytes(model.load_model_facts()) + est.drafter_bytes) / max(est.fetchers, 1) / model.GB
        what = " (weights + drafter)" if est.drafter_bytes else ""
        return (
            est.fetch_seconds,
            f"fetcher_start + {share:.0f} GB{what} from the Hub into S3 at {est.fetch_gbps:g} GB/s",
        )
    if t == "kubernetes:helm.sh/v3:Release":
        key = HELM_KEYS.get(inputs.get("name", ""), "helm_gpu_operator")
        return est.of(key), key
    if t == "kubernetes:batch/v1:Job" and "smoke.py" in json.dumps(inputs.get("spec", {})):
        return est.of("smoke_test"), "smoke_test"
    if (
        t == "kubernetes:batch/v1:Job"
        and ((((inputs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}).get(
            "app.kubernetes.io/component"
        )
        == "fabric-preflight"
    ):
        # Its pods need the runtime image first (pulled beside the pre-pull DaemonSet, on the same nodes).
        return est.of("image_pull") + est.of("fabric_preflight"), "image_pull + fabric_preflight"
    if t == "kubernetes:batch/v1:Job" and _is_graph_ready_job(inputs):
        return est.load_seconds + est.of(est.warmup_key), f"weights load ({est.load_what}) + {est.warmup_key}"
    if t == "kubernetes:batch/v1:Job":
        verify = est.of("verify_checkpoint")
        # The drafter (kimi-k3:serving.speculation) is downloaded by the Job wherever it writes the cache.
        drafter = est.drafter_bytes / (est.download_gbps * model.GB) if downloads_from_hub(inputs, "DRAFTER") else 0.0
        plus = f" + drafter {est.drafter_bytes / model.GB:.1f} GB" if drafter else ""
        if downloads_from_hub(inputs):
            return est.download_seconds + drafter + verify, f"download {est.download_gbps:g} GB/s{plus} + verify"
        return drafter + verify, f"verify_checkpoint (pre-staged weights, no download){plus}"
    if t == "kubernetes:apps/v1:DaemonSet" and _component(r) == PREFETCH_COMPONENT:
        return est.prefetch_seconds, est.prefetch_what
    if t == "kubernetes:apps/v1:DaemonSet" and is_image_prepull(r):
        return est.of("image_pull"), "image_pull (runtime image onto the GPU nodes)"
    if t.endswith(":DynamoGraphDeployment") and "pulumi.com/skipAwait" not in _annotations(inputs):
        return est.load_seconds + est.of(est.warmup_key), f"weights load ({est.load_what}) + {est.warmup_key}"
    if t == "gcp:container/nodePool:NodePool":  # the GPU pool is the one with accelerators
        key = (
            "gke_gpu_node_pool" if (inputs.get("nodeConfig") or {}).get("guestAccelerators") else "gke_system_node_pool"
        )
        return est.of(key), key
    if t == "gcp:container/cluster:Cluster":
        return est.of("gke_cluster"), "gke_cluster"
    if t.startswith("gcp:"):
        return est.of("gcp_default"), "gcp_default"
    if t == "kubernetes:core/v1:PersistentVolumeClaim" and (inputs.get("spec") or {}).get("storageClassName") == (
        "standard-rwx"
    ):
        return est.of("filestore_pvc"), "filestore_pvc (compile cache)"
    if t.startswith("aws:iam/"):
        return est.of("iam"), "iam"
    if t.startswith("aws:"):
        return est.of("aws_default"), "aws_default"
    return est.of("kubernetes_default"), "kubernetes_default"


def _component(r: dict[str, Any]) -> Optional[str]:
    return r.get("inputs", {}).get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component")


def is_image_prepull(r: dict[str, Any]) -> bool:
    return _component(r) == PREPULL_COMPONENT


def _annotations(inputs: dict[str, Any]) -> dict[str, Any]:
    return (inputs.get("metadata") or {}).get("annotations") or {}


def _is_graph_ready_job(job_inputs: dict[str, Any]) -> bool:
    """The Job `pulumi up` waits on until the graph is Ready (kimi_k3/pods/graph_watch.py)."""
    labels = (((job_inputs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get("app.kubernetes.io/component") == "graph-ready"


def downloads_from_hub(job_inputs: dict[str, Any], what: str = "MODEL") -> bool:
    """Whether a model-cache Job runs `hf download` of the weights (what MODEL; with storage.fsx.s3ImportPath it only
    verifies them) or of the drafter (what DRAFTER)."""
    pod = job_inputs.get("spec", {}).get("template", {}).get("spec", {})
    commands = [
        c.get("command", []) + c.get("args", []) for c in pod.get("initContainers", []) + pod.get("containers", [])
    ]
    return f'hf download "${what}_REPO"' in " ".join(a for c in commands for a in c)


@dataclass(frozen=True)
class Step:
    name: str
    type: str
    start: float
    finish: float
    what: str


@dataclass(frozen=True)
class CriticalPath:
    steps: tuple[Step, ...]  # in order, each the latest-finishing prerequisite of the next
    total_seconds: float  # estimated time to first token (the serving graph Ready)
    finish: dict[str, float]  # urn -> estimated finish

    def lines(self) -> list[str]:
        out = [f"critical path (estimated time to first token {fmt(self.total_seconds)}):"]
        for s in self.steps:
            out.append(f"  {fmt(s.start):>8} -> {fmt(s.finish):>8}  {s.name}  [{s.what}]")
        return out


def fmt(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def redeploy(est: Estimates) -> Estimates:
    """A re-deploy: the serving graph re-created while the cluster, the verified weights, the pre-pulled image and
    (with a compile-cache volume) the compile caches stay; everything else is already there and costs nothing."""
    return replace(est, warmup_key="worker_warmup_cached" if est.compile_cache else "worker_warmup")


def critical_path(
    resources: list[dict[str, Any]], est: Estimates, target: Optional[str] = None, existing: bool = False
) -> CriticalPath:
    """Longest path to `target` (default: the graph-ready Job, else the DynamoGraphDeployment) through dependsOn
    and provider edges.
    `existing`: every resource but the target already exists (a re-deploy of the graph)."""
    by_urn = {r["urn"]: r for r in resources}
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent") in by_urn:
            children.setdefault(r["parent"], []).append(r["urn"])
    if target is None:  # the graph Ready: the graph-ready Job that waits for it, else the graph itself
        target = next(
            (
                u
                for u, r in by_urn.items()
                if r["type"] == "kubernetes:batch/v1:Job" and _is_graph_ready_job(r.get("inputs", {}))
            ),
            next((u for u, r in by_urn.items() if r["type"].endswith(":DynamoGraphDeployment")), None),
        )

    def _duration(r: dict[str, Any]) -> tuple[float, str]:
        if existing and r["urn"] != target:
            return 0.0, "exists"
        return duration(r, est)

    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    why: dict[str, Optional[str]] = {}  # urn -> the prerequisite that set its start
    visiting: set[str] = set()

    def start_of(urn: str) -> float:
        if urn in start:
            return start[urn]
        if urn in visiting:
            raise ValueError(f"dependency cycle at {urn}")
        visiting.add(urn)
        r = by_urn[urn]
        best, cause = 0.0, None
        # A Kubernetes object also needs its provider (configured from the cluster's kubeconfig).
        for dep in [*r.get("dependsOn", []), *([r["provider"]] if r.get("provider") else [])]:
            if dep in by_urn and finish_of(dep) > best:
                best, cause = finish_of(dep), dep
        visiting.discard(urn)
        start[urn], why[urn] = best, cause
        return best

    def finish_of(urn: str) -> float:
        if urn in finish:
            return finish[urn]
        s = start_of(urn)
        f = s + _duration(by_urn[urn])[0]
        for c in children.get(urn, []):
            f = max(f, finish_of(c))
        finish[urn] = f
        return f

    for urn in by_urn:
        finish_of(urn)
    if target is None:
        target = max(finish, key=finish.get)
    chain, urn = [], target
    while urn is not None:
        r = by_urn[urn]
        if r["type"].startswith("kimi-k3:"):  # a component finishes with its last child: follow that child
            last = max(children.get(urn, []), key=lambda c: finish[c], default=None)
            urn = last if last is not None else why[urn]
            continue
        chain.append(Step(r["name"], r["type"], start[urn], finish[urn], _duration(r)[1]))
        urn = why[urn]
    return CriticalPath(steps=tuple(reversed(chain)), total_seconds=finish[target], finish=finish)


def goals() -> dict[str, float]:
    return dict(_defaults()["goals"])


def report(resources: list[dict[str, Any]], cfg: StackConfig, graph, est: Optional[Estimates] = None) -> list[str]:
    """What `kimi-k3 render` prints: the fresh-account critical path and the re-deploy path, each against its goal.
    `est`: the stack's estimates where they are resolved already (Blueprint.durations)."""
    est = est if est is not None else estimates(cfg, graph)
    g = goals()
    fresh = critical_path(resources, est)
    again = critical_path(resources, redeploy(est), existing=True)

    def verdict(total: float, goal: float) -> str:
        return f"goal <= {fmt(goal)}: {'met' if total <= goal else 'MISSED by ' + fmt(total - goal)}"

    out = fresh.lines()
    out[0] = out[0][:-2] + f"; {verdict(fresh.total_seconds, g['fresh_seconds'])}):"
    redo = again.lines()
    kept = ["cluster", "weights" + (" (node-local copies too)" if est.node_local else ""), "image"]
    if est.compile_cache:
        kept.append("compile caches")
    redo[0] = (
        f"re-deploy ({', '.join(kept[:-1])} and {kept[-1]} in place; "
        f"estimated time to first token {fmt(again.total_seconds)}; "
        f"{verdict(again.total_seconds, g['redeploy_seconds'])}):"
    )
    return out + redo
