"""Critical path of a deployment, from the rendered dependency graph (resources.json) and duration estimates.

Edges: a resource starts when everything in its `dependsOn` (and its provider) has finished; as in the engine,
a component's own dependencies do not hold back its children (components pass them down explicitly). A
component finishes when its last child does. Durations: recipes/durations.yaml (each with its source) overridden by `kimi-k3:estimates`; the download
and worker load come from kimi_k3.planner (one implementation of bytes / bandwidth).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Optional


from .data import recipe_file
from . import aws, planner
from .config import StackConfig
from .graph import role_flag
from .manifests import PREFETCH_COMPONENT, PREPULL_COMPONENT

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
    download_seconds: float        # the whole checkpoint from Hugging Face by the in-cluster download Job
    load_seconds: float            # every worker pod reading its share of the weights, all at once
    fetch_seconds: float = 0.0     # one EC2 fetcher: start + its share of the checkpoint from the Hub into S3
    fetchers: int = 0
    fetch_gbps: float = 0.0
    load_what: str = "weights load (planner)"
    warmup_key: str = "worker_warmup"          # worker_warmup_cached on a re-deploy with a compile cache
    compile_cache: bool = False
    prefetch_seconds: float = 0.0  # the weights-prefetch DaemonSet: every GPU node holding the checkpoint
    prefetch_what: str = ""
    node_local: bool = False       # workers load the node-local copy

    def of(self, key: str) -> float:
        return self.seconds[key]


def weights_backend(cfg: StackConfig) -> planner.StorageBackend:
    """Where the workers read the weights from, as throughput facts (recipes/storage.yaml)."""
    kind = cfg.storage.resolved_kind
    if kind == "fsx-lustre":
        f = cfg.storage.fsx
        return planner.load_storage_backends(f.storage_capacity_gib, f.per_unit_storage_throughput)["fsx_lustre"]
    if kind in ("s3", "efs"):
        return planner.load_storage_backends()[kind]
    provisioner = cfg.storage.provisioner or ""
    return planner.load_storage_backends()["efs" if "efs" in provisioner else "fsx_lustre"]


def link_gbps(cfg: StackConfig) -> Optional[float]:
    """The Local Zone link the weights cross (eks mode builds every storage kind in the Region), else None."""
    c = cfg.cluster
    if c.mode != "eks" or not aws.is_local_zone(c.gpu_nodes.availability_zone, c.region):
        return None
    return cfg.estimates.local_zone_link_gbps or planner.local_zone_link_gbps()


def prefetch_estimate(cfg: StackConfig, graph, start_seconds: float) -> tuple[float, str]:
    """(seconds, what) for the weights-prefetch DaemonSet (kimi_k3/weights_prefetch.py): the N GPU nodes read the
    checkpoint from the bucket once between them (file i by node i mod N), bounded by the Local Zone link and N
    nodes' ENA, then each receives the (N-1)/N it did not read from its peers. The two phases overlap in practice
    (a peer serves a file as soon as it holds it); they are added here."""
    m = planner.load_model_facts()
    checkpoint, nodes = planner.checkpoint_bytes(m), max(graph.nodes, 1)
    backend, link = weights_backend(cfg), link_gbps(cfg)
    bucket_gbps = nodes * backend.per_client_gbps
    if backend.shared and backend.aggregate_gbps is not None:
        bucket_gbps = min(bucket_gbps, backend.aggregate_gbps)
    if link is not None:
        bucket_gbps = min(bucket_gbps, link)
    peer_gbps = float(recipe_file("storage.yaml")["nvme"]["peer_gbps"])
    peer_bytes = checkpoint * (nodes - 1) / nodes
    seconds = start_seconds + checkpoint / (bucket_gbps * planner.GB) + peer_bytes / (peer_gbps * planner.GB)
    where = "over the Local Zone link" if link is not None else f"from {backend.name}"
    return seconds, (f"weights_prefetch_start + {checkpoint / 1e12:.2f} TB once {where} at {bucket_gbps:g} GB/s + "
                     f"{peer_bytes / 1e12:.2f} TB from peers per node at {peer_gbps:g} GB/s")


def load_estimate(cfg: StackConfig, graph) -> tuple[float, str]:
    """(seconds, what) for every worker pod of the graph reading its share of the weights at once."""
    m = planner.load_model_facts()
    if getattr(graph, "node_local_weights", False):
        # Each pod reads its share from its own node's NVMe copy: nothing shared, nothing over the link.
        nvme = planner.load_storage_backends()["nvme"]
        per_pod = max((planner.bytes_per_pod(m, r.tp, r.gpus_per_node, role_flag(r, "--load-format", "auto"))
                       for r in graph.roles if r.replicas), default=0)
        if not per_pod:
            return 0.0, "no workers"
        return per_pod / (nvme.per_client_gbps * planner.GB), \
            f"node-local nvme: {per_pod / planner.GB:.0f} GB/pod at {nvme.per_client_gbps:g} GB/s"
    backend, link = weights_backend(cfg), link_gbps(cfg)
    reads = [(planner.bytes_per_pod(m, r.tp, r.gpus_per_node, role_flag(r, "--load-format", "auto")), r.nodes)
             for r in graph.roles if r.replicas]
    if not reads:
        return 0.0, "no workers"
    pods = sum(n for _, n in reads)
    total = sum(b * n for b, n in reads)
    per_pod = max(b for b, _ in reads)
    rate = backend.per_client_gbps
    seconds = per_pod / (rate * planner.GB)
    if backend.shared and backend.aggregate_gbps is not None:
        seconds = max(seconds, total / (backend.aggregate_gbps * planner.GB))
    what = f"{backend.name}: {per_pod / planner.GB:.0f} GB/pod at {rate:g} GB/s"
    if link is not None:
        seconds = max(seconds, total / (link * planner.GB))
        what += f", {total / 1e12:.2f} TB over the Local Zone link at {link:g} GB/s"
    return seconds, what


def estimates(cfg: StackConfig, graph) -> Estimates:
    d = _defaults()
    seconds = {**d["seconds"], **cfg.estimates.seconds}
    gbps = cfg.estimates.download_gbps or d["download_gbps"]
    job_gbps = cfg.estimates.download_gbps or d["download_job_gbps"]
    m = planner.load_model_facts()
    checkpoint = planner.checkpoint_bytes(m)
    fetchers = cfg.storage.s3.fetchers if cfg.storage.resolved_kind == "s3" and cfg.cluster.mode == "eks" else 0
    fetch = seconds["fetcher_start"] + checkpoint / max(fetchers, 1) / (gbps * planner.GB)
    load, what = load_estimate(cfg, graph)
    cache = bool(getattr(graph, "compile_cache", False))
    local = bool(getattr(graph, "node_local_weights", False))
    prefetch, prefetch_what = prefetch_estimate(cfg, graph, seconds["weights_prefetch_start"]) if local else (0.0, "")
    return Estimates(seconds=seconds, download_gbps=job_gbps, download_seconds=checkpoint / (job_gbps * planner.GB),
                     load_seconds=load, fetch_seconds=fetch, fetchers=fetchers, fetch_gbps=gbps, load_what=what,
                     compile_cache=cache, warmup_key="worker_warmup", prefetch_seconds=prefetch,
                     prefetch_what=prefetch_what, node_local=local)


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
        share = planner.checkpoint_bytes(planner.load_model_facts()) / max(est.fetchers, 1) / planner.GB
        return est.fetch_seconds, f"fetcher_start + {share:.0f} GB from the Hub into S3 at {est.fetch_gbps:g} GB/s"
    if t == "kubernetes:helm.sh/v3:Release":
        key = HELM_KEYS.get(inputs.get("name", ""), "helm_gpu_operator")
        return est.of(key), key
    if t == "kubernetes:batch/v1:Job" and "smoke.py" in json.dumps(inputs.get("spec", {})):
        return est.of("smoke_test"), "smoke_test"
    if t == "kubernetes:batch/v1:Job" and ((((inputs.get("spec") or {}).get("template") or {}).get("metadata") or {})
                                            .get("labels") or {}).get("app.kubernetes.io/component") == "fabric-preflight":
        # Its pods need the runtime image first (pulled beside the pre-pull DaemonSet, on the same nodes).
        return est.of("image_pull") + est.of("fabric_preflight"), "image_pull + fabric_preflight"
    if t == "kubernetes:batch/v1:Job" and _is_graph_ready_job(inputs):
        return est.load_seconds + est.of(est.warmup_key), f"weights load ({est.load_what}) + {est.warmup_key}"
    if t == "kubernetes:batch/v1:Job":
        verify = est.of("verify_checkpoint")
        if downloads_from_hub(inputs):
            return est.download_seconds + verify, f"download {est.download_gbps:g} GB/s + verify"
        return verify, "verify_checkpoint (pre-staged weights, no download)"
    if t == "kubernetes:apps/v1:DaemonSet" and _component(r) == PREFETCH_COMPONENT:
        return est.prefetch_seconds, est.prefetch_what
    if t == "kubernetes:apps/v1:DaemonSet" and is_image_prepull(r):
        return est.of("image_pull"), "image_pull (runtime image onto the GPU nodes)"
    if t.endswith(":DynamoGraphDeployment") and "pulumi.com/skipAwait" not in _annotations(inputs):
        return est.load_seconds + est.of(est.warmup_key), f"weights load ({est.load_what}) + {est.warmup_key}"
    if t.startswith("aws:iam/"):
        return est.of("iam"), "iam"
    if t.startswith("aws:"):
        return est.of("aws_default"), "aws_default"
    return est.of("kubernetes_default"), "kubernetes_default"


FETCHER_ROLE = "weights-fetcher"      # kimi-k3/role tag of the EC2 fetchers (components/aws/storage.py)


def is_fetcher(r: dict[str, Any]) -> bool:
    return r.get("inputs", {}).get("tags", {}).get("kimi-k3/role") == FETCHER_ROLE


def _component(r: dict[str, Any]) -> Optional[str]:
    return r.get("inputs", {}).get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component")


def is_image_prepull(r: dict[str, Any]) -> bool:
    return _component(r) == PREPULL_COMPONENT


def _annotations(inputs: dict[str, Any]) -> dict[str, Any]:
    return (inputs.get("metadata") or {}).get("annotations") or {}


def _is_graph_ready_job(job_inputs: dict[str, Any]) -> bool:
    """The Job `pulumi up` waits on until the graph is Ready (kimi_k3/graph_watch.py)."""
    labels = ((((job_inputs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {})
    return labels.get("app.kubernetes.io/component") == "graph-ready"


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


def redeploy(est: Estimates) -> Estimates:
    """A re-deploy: the serving graph re-created while the cluster, the verified weights, the pre-pulled image and
    (with a compile-cache volume) the compile caches stay; everything else is already there and costs nothing."""
    return replace(est, warmup_key="worker_warmup_cached" if est.compile_cache else "worker_warmup")


def critical_path(resources: list[dict[str, Any]], est: Estimates, target: Optional[str] = None,
                  existing: bool = False) -> CriticalPath:
    """Longest path to `target` (default: the graph-ready Job, else the DynamoGraphDeployment) through dependsOn
    and provider edges.
    `existing`: every resource but the target already exists (a re-deploy of the graph)."""
    by_urn = {r["urn"]: r for r in resources}
    children: dict[str, list[str]] = {}
    for r in resources:
        if r.get("parent") in by_urn:
            children.setdefault(r["parent"], []).append(r["urn"])
    if target is None:  # the graph Ready: the graph-ready Job that waits for it, else the graph itself
        target = next((u for u, r in by_urn.items() if r["type"] == "kubernetes:batch/v1:Job"
                       and _is_graph_ready_job(r.get("inputs", {}))),
                      next((u for u, r in by_urn.items() if r["type"].endswith(":DynamoGraphDeployment")), None))

    def _duration(r: dict[str, Any]) -> tuple[float, str]:
        if existing and r["urn"] != target:
            return 0.0, "exists"
        return duration(r, est)

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


def report(resources: list[dict[str, Any]], cfg: StackConfig, graph) -> list[str]:
    """What `kimi-k3 render` prints: the fresh-account critical path and the re-deploy path, each against its goal."""
    est = estimates(cfg, graph)
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
    redo[0] = (f"re-deploy ({', '.join(kept[:-1])} and {kept[-1]} in place; "
               f"estimated time to first token {fmt(again.total_seconds)}; "
               f"{verdict(again.total_seconds, g['redeploy_seconds'])}):")
    return out + redo
