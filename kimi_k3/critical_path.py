"""Critical path of a deployment, from the rendered dependency graph (resources.json) and duration estimates.

Edges: a resource starts when everything in its `dependsOn` (and its provider) has finished; as in the engine,
a component's own dependencies do not hold back its children (components pass them down explicitly). A
component finishes when its last child does. Durations: recipes/durations.yaml (each with its source) overridden by `kimi-k3:estimates`; the download
and worker load come from kimi_k3.planner (one implementation of bytes / bandwidth).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional


from .data import recipe_file
from . import planner
from .config import StackConfig

HELM_KEYS = {"gpu-operator": "helm_gpu_operator", "aws-efa-k8s-device-plugin": "helm_efa_device_plugin",
             "dra-driver-nvidia-gpu": "helm_dra_driver", "dynamo-platform": "helm_dynamo_platform"}
TYPE_KEYS = {
    "aws:eks/cluster:Cluster": "eks_cluster", "aws:fsx/lustreFileSystem:LustreFileSystem": "fsx_lustre",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "fsx_data_repository",
    "aws:efs/fileSystem:FileSystem": "efs", "aws:ec2/natGateway:NatGateway": "nat_gateway",
    "aws:eks/addon:Addon": "eks_addon",
}


def _defaults() -> dict[str, Any]:
    return recipe_file("durations.yaml")


@dataclass(frozen=True)
class Estimates:
    seconds: dict[str, float]
    download_gbps: float
    download_seconds: float        # the whole checkpoint from Hugging Face
    load_seconds: float            # every worker pod reading its weights from the cache, all at once

    def of(self, key: str) -> float:
        return self.seconds[key]


def estimates(cfg: StackConfig, graph) -> Estimates:
    d = _defaults()
    seconds = {**d["seconds"], **cfg.estimates.seconds}
    gbps = cfg.estimates.download_gbps or d["download_gbps"]
    m = planner.load_model_facts()
    hub = planner.StorageBackend(name="huggingface", description="hf download", shared=False,
                                 per_client_gbps=gbps, aggregate_gbps=None)
    download = planner.load_seconds(planner.checkpoint_bytes(m), 1, hub)
    backend = _cache_backend(cfg)
    pods = graph.nodes
    load = max(planner.load_seconds(planner.bytes_per_pod(m, r.tp, r.gpus_per_node), pods, backend)
               for r in graph.roles)
    return Estimates(seconds=seconds, download_gbps=gbps, download_seconds=download, load_seconds=load)


def _cache_backend(cfg: StackConfig) -> planner.StorageBackend:
    kind = cfg.storage.resolved_kind
    if kind == "fsx-lustre":
        f = cfg.storage.fsx
        return planner.load_storage_backends(f.storage_capacity_gib, f.per_unit_storage_throughput)["fsx_lustre"]
    if kind == "efs":
        return planner.load_storage_backends()["efs"]
    provisioner = cfg.storage.provisioner or ""
    return planner.load_storage_backends()["efs" if "efs" in provisioner else "fsx_lustre"]


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
    if t == "kubernetes:helm.sh/v3:Release":
        key = HELM_KEYS.get(inputs.get("name", ""), "helm_gpu_operator")
        return est.of(key), key
    if t == "kubernetes:batch/v1:Job" and ((((inputs.get("spec") or {}).get("template") or {}).get("metadata") or {})
                                            .get("labels") or {}).get("app.kubernetes.io/component") == "fabric-preflight":
        return est.of("fabric_preflight"), "fabric_preflight"
    if t == "kubernetes:batch/v1:Job":
        verify = est.of("verify_checkpoint")
        if downloads_from_hub(inputs):
            return est.download_seconds + verify, f"download {est.download_gbps:g} GB/s + verify"
        return verify, "verify_checkpoint (pre-staged weights, no download)"
    if t.endswith(":DynamoGraphDeployment"):
        return est.load_seconds + est.of("worker_warmup"), "weights load (planner) + warm-up"
    if t.startswith("aws:iam/"):
        return est.of("iam"), "iam"
    if t.startswith("aws:"):
        return est.of("aws_default"), "aws_default"
    return est.of("kubernetes_default"), "kubernetes_default"


def downloads_from_hub(job_inputs: dict[str, Any]) -> bool:
    """Whether a model-cache Job runs `hf download` (with storage.fsx.s3ImportPath it only verifies)."""
    pod = job_inputs.get("spec", {}).get("template", {}).get("spec", {})
    commands = [c.get("command", []) + c.get("args", [])
                for c in pod.get("initContainers", []) + pod.get("containers", [])]
    return "hf download" in json.dumps(commands)


@dataclass(frozen=True)
class Step:
    name: str
    type: str
    start: float
    finish: float
    what: str


@dataclass(frozen=True)
class CriticalPath:
    steps: tuple[Step, ...]          # in order, each the latest-finishing prerequisite of the next
    total_seconds: float             # estimated time to first token (the serving graph Ready)
    finish: dict[str, float]         # urn -> estimated finish

    def lines(self) -> list[str]:
        out = [f"critical path (estimated time to first token {fmt(self.total_seconds)}):"]
        for s in self.steps:
            out.append(f"  {fmt(s.start):>8} -> {fmt(s.finish):>8}  {s.name}  [{s.what}]")
        return out


def fmt(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def critical_path(resources: list[dict[str, Any]], est: Estimates, target: Optional[str] = None) -> CriticalPath:
    """Longest path to `target` (default: the DynamoGraphDeployment) through dependsOn and provider edges."""
    by_urn = {r["urn"]: r for r in resources}
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent") in by_urn:
            children.setdefault(r["parent"], []).append(r["urn"])
    start: dict[str, float] = {}
    finish: dict[str, float] = {}
    why: dict[str, Optional[str]] = {}     # urn -> the prerequisite that set its start
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
        f = s + duration(by_urn[urn], est)[0]
        for c in children.get(urn, []):
            f = max(f, finish_of(c))
        finish[urn] = f
        return f

    for urn in by_urn:
        finish_of(urn)
    if target is None:
        target = next((u for u, r in by_urn.items() if r["type"].endswith(":DynamoGraphDeployment")),
                      max(finish, key=finish.get))
    chain, urn = [], target
    while urn is not None:
        r = by_urn[urn]
        if r["type"].startswith("kimi-k3:"):  # a component finishes with its last child: follow that child
            last = max(children.get(urn, []), key=lambda c: finish[c], default=None)
            urn = last if last is not None else why[urn]
            continue
        chain.append(Step(r["name"], r["type"], start[urn], finish[urn], duration(r, est)[1]))
        urn = why[urn]
    return CriticalPath(steps=tuple(reversed(chain)), total_seconds=finish[target], finish=finish)
