"""The GKE cluster, its node pools, the weights bucket's access and the GPU node facts, as pure data from typed config
and recipes/facts/gcp.yaml. components/gcp/ only registers what these return. Every check raises a ConfigError naming
the key, the value and what is allowed, before the first resource is registered."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file
from kimi_k3.facts.images import operator_default_fs_group
from kimi_k3.graph.model import DeviceClaim, NodeFacts, NodeLocalDisk

KEY = "kimi-k3:cluster.gke"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
SYSTEM_LABELS = {"kimi-k3.io/node-role": "system"}
RDMA_CLAIM = "rdma"
RDMA_TEMPLATE = "kimi-k3-rdma"  # the ResourceClaimTemplate every A4X Max GPU pod claims
FETCHER_SA = "kimi-k3-weights-fetcher"
WORKER_SA = "kimi-k3-weights-reader"
DEFAULT_MACHINE = {"gb300": "a4x-maxgpu-4g-metal", "gb200": "a4x-highgpu-4g"}


def facts() -> dict[str, Any]:
    return recipe_file("facts/gcp.yaml")


@dataclass(frozen=True)
class GkeNodePlan:
    """The GPU node pool, checked against the recipe, the NVLink domain and the reservation."""

    machine_type: str
    machine: dict[str, Any]  # recipes/facts/gcp.yaml machine_types[machine_type]
    nodes: int
    reservation: str
    reservation_nodes: int
    zone: str

    @property
    def dranet(self) -> bool:
        return self.machine["rdma"] == "dranet"


def _version_ok(version: str, floor: Optional[str]) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        base, build = v.split("-gke.")
        return (*map(int, base.split(".")), int(build))

    return floor is None or parts(version) >= parts(floor)


def gpu_node_plan(cfg: StackConfig, platform: str, nodes: int) -> GkeNodePlan:
    """Validate `kimi-k3:cluster.gke` for a recipe that needs `nodes` GPU nodes of `platform`."""
    f = facts()
    g = cfg.cluster.gke
    mtype = g.gpu_nodes.machine_type or DEFAULT_MACHINE.get(platform, "")
    machine = f["machine_types"].get(mtype)
    if machine is None or machine["platform"] != platform:
        fitting = sorted(n for n, m in f["machine_types"].items() if m["platform"] == platform)
        raise ConfigError(
            f"{KEY}.gpuNodes.machineType = {mtype!r}: "
            + ("no facts for it in recipes/facts/gcp.yaml" if machine is None else f"has {machine['platform']} GPUs")
            + f", but recipe {cfg.recipe} runs on {platform}; allowed: {', '.join(fitting) or 'none'}"
        )
    minor = ".".join(g.version.split(".")[:2])
    floors = f["min_gke_versions"][platform]
    if minor not in floors or not _version_ok(g.version, floors[minor]):
        allowed = ", ".join(f"{m}: {v or 'any build'}" for m, v in floors.items())
        raise ConfigError(
            f"{KEY}.version = {g.version!r}: {mtype} needs a GKE build at or above its minor's floor "
            f"(recipes/facts/gcp.yaml min_gke_versions, from NVIDIA/aicr gke-a4x-max-networking.md); allowed: {allowed}"
        )
    most = machine["max_nodes_per_nvlink_domain"]
    if nodes > min(most, g.gpu_nodes.reservation_nodes):
        raise ConfigError(
            f"{KEY}.gpuNodes.reservationNodes = {g.gpu_nodes.reservation_nodes}: recipe {cfg.recipe} needs {nodes} "
            f"GPU nodes; allowed: {nodes} to {most} ({mtype}: at most {most} nodes share one NVLink domain)"
        )
    reservation = g.gpu_nodes.reservation or ""
    if machine["reservation_sub_block"] and "/reservationSubBlocks/" not in reservation:
        raise ConfigError(
            f"{KEY}.gpuNodes.reservation = {reservation!r}: {mtype} pools must target a reservation sub-block; "
            "allowed: RESERVATION/reservationBlocks/BLOCK/reservationSubBlocks/SUB_BLOCK"
        )
    return GkeNodePlan(mtype, machine, nodes, reservation, g.gpu_nodes.reservation_nodes, g.zone)


def node_local_disk(plan: GkeNodePlan) -> Optional[NodeLocalDisk]:
    """The pool's Local SSD array, where its machine type has one (recipes/facts/gcp.yaml local_ssd)."""
    if not plan.machine.get("local_ssd"):
        return None
    d = facts()["local_ssd"]
    return NodeLocalDisk(
        d["array_mount_point"],
        d["host_path"],
        float(d["read_gbps"]),
        float(d["peer_gbps"]),
        "recipes/facts/gcp.yaml local_ssd",
    )


def node_facts(plan: GkeNodePlan, weights_on_gcs: bool, filestore: bool = False) -> NodeFacts:
    """What the serving graph's GPU pods must carry on this pool (AICR gke-a4x-max-networking.md "Workload wiring")."""
    f = facts()
    labels = {f["labels"]["instance_type"]: plan.machine_type}
    claims: tuple[DeviceClaim, ...] = ()
    annotations: dict[str, str] = {}
    if plan.machine.get("network_profile"):
        labels[f["labels"]["network_profile"]] = plan.machine["network_profile"]
    if plan.dranet:
        m = plan.machine
        claims = (DeviceClaim(RDMA_CLAIM, RDMA_TEMPLATE, m["dranet_device_class"], m["dranet_devices"]),)
    else:  # multi-networking: the pod's interfaces by Network name (GKE multi-network pod annotations)
        nets = [{"interfaceName": "eth0", "network": "default"}] + [
            {"interfaceName": f"eth{i + 1}", "network": n}
            for i, n in enumerate([plan.machine["gvnic_network"], *plan.machine["rdma_networks"]])
        ]
        annotations = {
            "networking.gke.io/default-interface": "eth0",
            "networking.gke.io/interfaces": json.dumps(nets, separators=(",", ":")),
        }
    return NodeFacts(
        gpu_node_labels=tuple(sorted(labels.items())),
        gpu_pod_annotations=tuple(sorted(annotations.items())),
        device_claims=claims,
        weights_pod_annotations=tuple(sorted(f["gcsfuse_pod_annotation"].items())) if weights_on_gcs else (),
        fetcher_service_account=FETCHER_SA if weights_on_gcs else "",
        worker_service_account=WORKER_SA if weights_on_gcs else "",
        # Filestore's CSIDriver applies fsGroup (fsGroupPolicy File): the root becomes writable by the workers' group.
        pod_fs_group=operator_default_fs_group() if filestore else None,
        node_local=node_local_disk(plan),
    )


def rdma_claim_template(namespace: str, claim: DeviceClaim) -> dict[str, Any]:
    """The DRANET ResourceClaimTemplate: all of a node's RDMA NICs (AICR: `all-mrdma`, count 8)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim.template,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "kimi-k3"},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": f"req-{claim.name}",
                            "exactly": {
                                "deviceClassName": claim.device_class,
                                "allocationMode": "ExactCount",
                                "count": claim.count,
                            },
                        }
                    ]
                }
            }
        },
    }


def gpu_node_labels(plan: GkeNodePlan) -> dict[str, str]:
    """Labels on the GPU pool's nodes that our pods may select (the rest GKE sets)."""
    return {"kimi-k3.io/node-role": "gpu", **plan.machine["node_labels"]}


def workload_principal(cfg: StackConfig, namespace: str, ksa: str) -> str:
    """A Kubernetes ServiceAccount as an IAM principal (Workload Identity Federation for GKE)."""
    g = cfg.cluster.gke
    pool = f"{g.project}{facts()['workload_pool_suffix']}"
    return (
        f"principal://iam.googleapis.com/projects/{g.project_number}/locations/global/workloadIdentityPools/"
        f"{pool}/subject/ns/{namespace}/sa/{ksa}"
    )


def bucket_bindings(cfg: StackConfig, namespace: str) -> list[tuple[str, str, str]]:
    """(name, role, member): the fetcher writes the weights bucket, the readers (workers, frontend) only read it."""
    roles = facts()["bucket_roles"]
    return [
        ("fetcher", roles["fetcher"], workload_principal(cfg, namespace, FETCHER_SA)),
        ("reader", roles["worker"], workload_principal(cfg, namespace, WORKER_SA)),
    ]


def weights_pv(name: str, bucket: Any, size_gi: int, namespace: str, claim: str) -> dict[str, Any]:
    """The weights bucket as a static PV through the GKE-managed GCS FUSE CSI driver, pre-bound to the cache PVC."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "kimi-k3"}},
        "spec": {
            "capacity": {"storage": f"{size_gi}Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "claimRef": {"namespace": namespace, "name": claim},
            # implicit-dirs: the Hub's tree has directories no object marks (GCS FUSE docs, mount options)
            "mountOptions": ["implicit-dirs"],
            "csi": {"driver": facts()["gcsfuse_csi_driver"], "volumeHandle": bucket},
        },
    }


def filestore_storage_class(network: Any) -> dict[str, Any]:
    """Our Filestore class: on the cluster's VPC (the driver's default network is `default`), the basic HDD tier,
    bound where the first worker runs (its zone), so the instance is reachable from the GPU nodes."""
    f = facts()["filestore"]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": f["storage_class"], "labels": {"app.kubernetes.io/part-of": "kimi-k3"}},
        "provisioner": f["provisioner"],
        "parameters": {"tier": f["tier"], "network": network},
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def compile_cache_pvc(namespace: str, claim: str) -> dict[str, Any]:
    """The compile cache on Filestore (GKE-managed CSI driver, ReadWriteMany), dynamically provisioned."""
    f = facts()["filestore"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "kimi-k3"}},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": f["storage_class"],
            "resources": {"requests": {"storage": f"{f['min_gib']}Gi"}},
        },
    }
