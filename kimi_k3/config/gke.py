"""`kimi-k3:cluster.gke`: the Google Cloud side of `kimi-k3:cluster.mode: gke` (kimi_k3/gcp/ plans from it)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Optional

from pydantic import Field, field_validator

from kimi_k3.config.base import Strict, allowed_as

GcpRegion = Annotated[
    str, Field(pattern=allowed_as(r"^[a-z]+-[a-z]+\d+$", "a Google Cloud region, e.g. us-central1 or europe-west4"))
]
GcpZone = Annotated[
    str, Field(pattern=allowed_as(r"^[a-z]+-[a-z]+\d+-[a-z]$", "a Google Cloud zone, e.g. us-central1-a"))
]
MachineType = Annotated[
    str,
    Field(pattern=allowed_as(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$", "a Compute Engine machine type, e.g. n2-standard-16")),
]


class GkeSystemNodesConfig(Strict):
    """`kimi-k3:cluster.gke.systemNodes`: the pool for controllers, the download Job and the frontend."""

    machine_type: MachineType = Field("n2-standard-16", alias="machineType", description="x86_64: the download image's")
    count: int = Field(2, ge=1, le=50)
    disk_gib: int = Field(200, alias="diskGiB", ge=20)


class GkeGpuNodesConfig(Strict):
    """`kimi-k3:cluster.gke.gpuNodes`: the GPU node pool (A4X Max or A4X), sized by the recipe."""

    machine_type: Optional[MachineType] = Field(
        None, alias="machineType", description="default: a4x-maxgpu-4g-metal (gb300) or a4x-highgpu-4g (gb200)"
    )
    reservation: Optional[str] = Field(
        None,
        min_length=1,
        pattern=allowed_as(
            r"^[a-z]([-a-z0-9]*[a-z0-9])?(/reservationBlocks/[a-z0-9-]+/reservationSubBlocks/[a-z0-9-]+)?$",
            "a reservation name, or RESERVATION/reservationBlocks/BLOCK/reservationSubBlocks/SUB_BLOCK",
        ),
        description="the reservation (A4X Max: its sub-block path); per user, like the EKS reservation id",
    )
    reservation_nodes: int = Field(
        18, alias="reservationNodes", ge=1, le=18, description="nodes the reservation (sub-block) holds: one NVL72"
    )
    placement_policy: Optional[str] = Field(
        None,
        alias="placementPolicy",
        min_length=1,
        description="the HIGH_THROUGHPUT workload policy (accelerator-topology 1x72); default: one of the stack's",
    )


class GkeConfig(Strict):
    """`kimi-k3:cluster.gke`: project, location, network and access of the GKE cluster."""

    project: Optional[str] = Field(
        None,
        pattern=allowed_as(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$", "a Google Cloud project id, e.g. my-team-prod"),
        description="per user: `pulumi config set --path kimi-k3:cluster.gke.project ...`",
    )
    project_number: Optional[str] = Field(
        None,
        alias="projectNumber",
        pattern=allowed_as(r"^\d{6,20}$", "the project's number (digits), e.g. 123456789012"),
        description="per user: names the Workload Identity principals of the weights bucket's IAM bindings",
    )
    region: GcpRegion = "us-central1"
    zone: GcpZone = Field("us-central1-a", description="the GPU nodes' zone (the reservation's)")
    version: str = Field(
        "1.34.3-gke.1318000",
        pattern=allowed_as(r"^1\.\d+\.\d+-gke\.\d+$", "a GKE version, e.g. 1.34.3-gke.1318000"),
        description="the control plane's minimum version (recipes/facts/gcp.yaml min_gke_versions)",
    )
    subnet_cidr: str = Field("10.80.0.0/20", alias="subnetCidr")
    pods_cidr: str = Field("10.96.0.0/14", alias="podsCidr")
    services_cidr: str = Field("10.100.0.0/20", alias="servicesCidr")
    master_cidr: str = Field("172.16.0.32/28", alias="masterCidr", description="the private control plane's /28")
    private_endpoint: bool = Field(
        True, alias="privateEndpoint", description="false: the control plane also has a public endpoint"
    )
    authorized_networks: list[str] = Field(
        default_factory=list,
        alias="authorizedNetworks",
        description="per user: CIDRs that may reach the control plane (master authorized networks); required",
    )
    system_nodes: GkeSystemNodesConfig = Field(default_factory=GkeSystemNodesConfig, alias="systemNodes")
    gpu_nodes: GkeGpuNodesConfig = Field(default_factory=GkeGpuNodesConfig, alias="gpuNodes")

    @field_validator("subnet_cidr", "pods_cidr", "services_cidr", "master_cidr", "authorized_networks")
    @classmethod
    def _cidrs(cls, v):
        for cidr in [v] if isinstance(v, str) else v:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not an IPv4 CIDR ({exc}); allowed: e.g. 10.80.0.0/20") from None
            if isinstance(v, list) and ipaddress.IPv4Network(cidr).prefixlen == 0:
                raise ValueError(
                    f"{cidr!r} opens the control plane to the whole internet; allowed: your own ranges, "
                    "e.g. 203.0.113.0/24"
                )
        return v


PER_USER = ("project", "projectNumber", "gpuNodes.reservation", "authorizedNetworks")


def check_gke_modes(cfg) -> None:
    """Cross-key rules of gke mode (StackConfig `cfg`; raises ConfigError naming the key, value and what is allowed)."""
    from kimi_k3.config.base import ConfigError

    mode, st = cfg.cluster.mode, cfg.storage
    kind = st.resolved_kind
    if "gke" in cfg.cluster.model_fields_set and mode != "gke":
        raise ConfigError(
            f"kimi-k3:cluster.gke: settings of cluster mode gke, but mode is {mode!r} and would ignore them; "
            "allowed: remove kimi-k3:cluster.gke, or mode gke"
        )
    if kind == "gcs" and mode != "gke":
        raise ConfigError(
            f"kimi-k3:storage.kind = 'gcs': created by this program only in kimi-k3:cluster.mode gke (mode is "
            f"{mode!r}); allowed here: {'s3, fsx-lustre, efs or existing' if mode == 'eks' else 'existing'}"
        )
    if st.compile_cache == "filestore" and (mode != "gke" or kind != "gcs"):
        raise ConfigError(
            f"kimi-k3:storage.compileCache = 'filestore': created by this program only in kimi-k3:cluster.mode gke "
            f"with storage kind gcs (mode {mode!r}, kind {kind!r}); allowed here: "
            f"{'efs or none' if mode == 'eks' else 'none'}"
        )
    if mode != "gke":
        return
    if kind not in ("gcs", "existing"):
        raise ConfigError(
            f"kimi-k3:storage.kind = {kind!r}: an AWS storage kind, but kimi-k3:cluster.mode is gke; "
            "allowed: gcs (a bucket of the stack, filled at t=0) or existing (with kimi-k3:storage.storageClass)"
        )
    if cfg.cluster.efa_devices_per_node is not None:
        raise ConfigError(
            f"kimi-k3:cluster.efaDevicesPerNode = {cfg.cluster.efa_devices_per_node}: Google Cloud has no EFA; "
            "allowed: remove it"
        )
    g = cfg.cluster.gke
    missing = [
        key
        for key, value in (
            ("project", g.project),
            ("projectNumber", g.project_number),
            ("gpuNodes.reservation", g.gpu_nodes.reservation),
            ("authorizedNetworks", g.authorized_networks),
        )
        if not value
    ]
    if missing:
        key = missing[0]
        raise ConfigError(
            f"kimi-k3:cluster.gke.{key}: required in gke mode but not set; allowed: your value, per user "
            f"(`pulumi config set --path 'kimi-k3:cluster.gke.{key}' ...`, docs/gke.md); offline tools assume a "
            "placeholder"
        )
