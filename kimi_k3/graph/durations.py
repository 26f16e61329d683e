"""critical_path.py -> durations.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.aws import storage
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file
from kimi_k3.facts import model, platforms
from kimi_k3.graph.model import node_local_disk
from kimi_k3.sizing import memory


def _defaults() -> dict[str, Any]:
    return recipe_file("facts/durations.yaml")


@dataclass(frozen=True)
class Estimates:
    seconds: dict[str, float]
    download_gbps: float
    download_seconds: float  # the whole checkpoint from Hugging Face by the in-cluster download Job
    load_seconds: float  # every worker pod reading its share of the weights, all at once
    fetch_seconds: float = 0.0  # one EC2 fetcher: start + its share of the checkpoint from the Hub into S3
    fetchers: int = 0
    fetch_gbps: float = 0.0
    load_what: str = "weights load (planner)"
    warmup_key: str = "worker_warmup"  # worker_warmup_cached on a re-deploy with a compile cache
    compile_cache: bool = False
    prefetch_seconds: float = 0.0  # the weights-prefetch DaemonSet: every GPU node holding the checkpoint
    prefetch_what: str = ""
    node_local: bool = False  # workers load the node-local copy
    drafter_bytes: float = 0.0  # the speculative drafter staged with the weights (kimi-k3:serving.speculation)

    def of(self, key: str) -> float:
        return self.seconds[key]


def staged_bytes(graph) -> int:
    """What every weights path carries: the checkpoint, and the drafter beside it when the stack speculates."""
    drafter = getattr(graph, "drafter", None)
    return model.checkpoint_bytes(model.load_model_facts()) + (drafter.bytes if drafter else 0)


def weights_backend(cfg: StackConfig) -> platforms.StorageBackend:
    """Where the workers read the weights from, as throughput facts (recipes/facts/storage.yaml)."""
    kind = cfg.storage.resolved_kind
    if kind == "fsx-lustre":
        f = cfg.storage.fsx
        return platforms.load_storage_backends(f.storage_capacity_gib, f.per_unit_storage_throughput)["fsx_lustre"]
    if kind in ("s3", "efs"):
        return platforms.load_storage_backends()[kind]
    if kind == "gcs":  # an object store read through a FUSE CSI driver, bound by the node's NIC: as s3 (assumption)
        return platforms.load_storage_backends()["s3"]
    provisioner = cfg.storage.provisioner or ""
    return platforms.load_storage_backends()["efs" if "efs" in provisioner else "fsx_lustre"]


def link_gbps(cfg: StackConfig) -> Optional[float]:
    """The Local Zone link the weights cross (eks mode builds every storage kind in the Region), else None."""
    c = cfg.cluster
    if c.mode != "eks" or not storage.is_local_zone(c.gpu_nodes.availability_zone, c.region):
        return None
    return cfg.estimates.local_zone_link_gbps or platforms.local_zone_link_gbps()


def prefetch_estimate(cfg: StackConfig, graph, start_seconds: float) -> tuple[float, str]:
    """(seconds, what) for the weights-prefetch DaemonSet (kimi_k3/pods/weights_prefetch.py): the N GPU nodes read the
    checkpoint from the bucket once between them (file i by node i mod N), bounded by the Local Zone link and N
    nodes' ENA, then each receives the (N-1)/N it did not read from its peers. The two phases overlap in practice
    (a peer serves a file as soon as it holds it); they are added here."""
    checkpoint, nodes = staged_bytes(graph), max(graph.nodes, 1)
    backend, link = weights_backend(cfg), link_gbps(cfg)
    bucket_gbps = nodes * backend.per_client_gbps
    if backend.shared and backend.aggregate_gbps is not None:
        bucket_gbps = min(bucket_gbps, backend.aggregate_gbps)
    if link is not None:
        bucket_gbps = min(bucket_gbps, link)
    peer_gbps = node_local_disk(graph.node_facts).peer_gbps
    peer_bytes = checkpoint * (nodes - 1) / nodes
    seconds = start_seconds + checkpoint / (bucket_gbps * model.GB) + peer_bytes / (peer_gbps * model.GB)
    where = "over the Local Zone link" if link is not None else f"from {backend.name}"
    return seconds, (
        f"weights_prefetch_start + {checkpoint / 1e12:.2f} TB once {where} at {bucket_gbps:g} GB/s + "
        f"{peer_bytes / 1e12:.2f} TB from peers per node at {peer_gbps:g} GB/s"
    )


def _drafter_per_pod(graph, role) -> int:
    """The drafter's bytes one pod of a speculating role loads: sharded by TP like the target (sizing/memory.py)."""
    drafter = getattr(graph, "drafter", None)
    if drafter is None or not getattr(role, "speculative_config", None):
        return 0
    return round(drafter.bytes * role.gpus_per_node / role.tp)


def load_estimate(cfg: StackConfig, graph) -> tuple[float, str]:
    """(seconds, what) for every worker pod of the graph reading its share of the weights at once."""
    m = model.load_model_facts()
    if getattr(graph, "node_local_weights", False):
        # Each pod reads its share from its own node's local copy: nothing shared, nothing over the link.
        read_gbps = node_local_disk(graph.node_facts).read_gbps
        per_pod = max(
            (
                memory.bytes_per_pod(m, r.tp * r.pp, r.gpus_per_node, r.load_format) + _drafter_per_pod(graph, r)
                for r in graph.roles
                if r.replicas
            ),
            default=0,
        )
        if not per_pod:
            return 0.0, "no workers"
        return per_pod / (
            read_gbps * model.GB
        ), f"node-local nvme: {per_pod / model.GB:.0f} GB/pod at {read_gbps:g} GB/s"
    backend, link = weights_backend(cfg), link_gbps(cfg)
    reads = [
        (memory.bytes_per_pod(m, r.tp * r.pp, r.gpus_per_node, r.load_format) + _drafter_per_pod(graph, r), r.nodes)
        for r in graph.roles
        if r.replicas
    ]
    if not reads:
        return 0.0, "no workers"
    pods = sum(n for _, n in reads)
    total = sum(b * n for b, n in reads)
    per_pod = max(b for b, _ in reads)
    rate = backend.per_client_gbps
    seconds = per_pod / (rate * model.GB)
    if backend.shared and backend.aggregate_gbps is not None:
        seconds = max(seconds, total / (backend.aggregate_gbps * model.GB))
    what = f"{backend.name}: {per_pod / model.GB:.0f} GB/pod at {rate:g} GB/s"
    if link is not None:
        seconds = max(seconds, total / (link * model.GB))
        what += f", {total / 1e12:.2f} TB over the Local Zone link at {link:g} GB/s"
    return seconds, what


def estimates(cfg: StackConfig, graph) -> Estimates:
    d = _defaults()
    seconds = {**d["seconds"], **cfg.estimates.seconds}
    gbps = cfg.estimates.download_gbps or d["download_gbps"]
    job_gbps = cfg.estimates.download_gbps or d["download_job_gbps"]
    checkpoint = staged_bytes(graph)  # the fetchers fetch the drafter too
    fetchers = cfg.storage.s3.fetchers if cfg.storage.resolved_kind == "s3" and cfg.cluster.mode == "eks" else 0
    fetch = seconds["fetcher_start"] + checkpoint / max(fetchers, 1) / (gbps * model.GB)
    load, what = load_estimate(cfg, graph)
    cache = bool(getattr(graph, "compile_cache", False))
    local = bool(getattr(graph, "node_local_weights", False))
    prefetch, prefetch_what = prefetch_estimate(cfg, graph, seconds["weights_prefetch_start"]) if local else (0.0, "")
    return Estimates(
        seconds=seconds,
        download_gbps=job_gbps,
        download_seconds=model.checkpoint_bytes(model.load_model_facts()) / (job_gbps * model.GB),
        load_seconds=load,
        fetch_seconds=fetch,
        fetchers=fetchers,
        fetch_gbps=gbps,
        load_what=what,
        compile_cache=cache,
        warmup_key="worker_warmup",
        prefetch_seconds=prefetch,
        prefetch_what=prefetch_what,
        node_local=local,
        drafter_bytes=float(graph.drafter.bytes) if getattr(graph, "drafter", None) else 0.0,
    )
