"""Typed stack configuration: every `kimi-k3:*` key, validated before any resource is registered.

Secrets (`kimi-k3:hfToken`, `kimi-k3:kubeconfig`) are never read into these models: only whether they are
set. Their values stay Pulumi Outputs and reach Kubernetes through a Secret.
"""
from __future__ import annotations

import ipaddress
import json
import math
import re
import typing
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import workload
from .data import recipe_file
from .errors import UserError, did_you_mean, shown

NAMESPACE = "kimi-k3"  # the project name (Pulumi.yaml): Pulumi passes `kimi-k3:<key>` to this program
# Other config namespaces a stack file may use: the providers this program creates, and Pulumi's own.
OTHER_NAMESPACES = ("aws", "kubernetes", "pulumi")
SECRET_KEYS = ("hfToken", "kubeconfig")

# Provisioners whose volumes attach to one node at a time: a 1.5 TB cache shared by every worker needs RWX.
RWO_ONLY_PROVISIONERS = {
    "ebs.csi.aws.com", "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io", "kubernetes.io/gce-pd",
    "disk.csi.azure.com", "kubernetes.io/azure-disk", "rancher.io/local-path", "kubernetes.io/no-provisioner",
}
# Default class names of managed clusters that are block storage (EKS gp2/gp3, GKE standard-rwo, AKS managed-csi).
RWO_ONLY_CLASS_NAMES = {"gp2", "gp3", "standard-rwo", "premium-rwo", "managed-csi", "managed-premium", "local-path"}

# What a pattern means, for error messages (a user is told the rule in words, never the regex).
PATTERN_ALLOWED: dict[str, str] = {}


def allowed_as(regex: str, allowed: str) -> str:
    """`regex`, recorded with the words an error message gives for it."""
    PATTERN_ALLOWED[regex] = allowed
    return regex


INSTANCE_TYPE = allowed_as(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$", "an EC2 instance type FAMILY.SIZE, e.g. m7i.8xlarge")
InstanceType = Annotated[str, Field(pattern=INSTANCE_TYPE)]
Zone = Annotated[str, Field(pattern=allowed_as(r"^[a-z]{2}(-[a-z]+)+-\d([a-z]|(-[a-z0-9]+)+)$",
                                               "an availability or Local Zone name, e.g. us-east-1a or us-east-1-dfw-2a"))]
PrincipalArn = Annotated[str, Field(pattern=allowed_as(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:[\w+=,.@/-]+$",
                                                       "an IAM role or user ARN, e.g. arn:aws:iam::123456789012:role/admin"))]
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"

Quantity = Annotated[str, Field(pattern=allowed_as(QUANTITY, "a Kubernetes quantity, e.g. 16Gi, 512Mi or 1000"))]
# A flag map: `--flag: value`; `true` is a bare flag; `null` (in overrides) drops the flag.
FlagValue = Union[bool, str, int, float, None]


class ConfigError(UserError):
    """One clear, user-facing configuration error (key, value, what is allowed)."""


MAX_TEXT = 4096  # longest text any key takes (a flag's JSON value is ~200): a pasted blob is refused, cut when shown
YAML11_BOOLS = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"}


def _scalar_kind(annotation: Any) -> Any:
    """bool, int or float for a field of that type (or Optional of it), else None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] if typing.get_origin(annotation) is Union \
        else [annotation]
    return args[0] if len(args) == 1 and args[0] in (bool, int, float) else None


class Strict(BaseModel):
    # Finite numbers only (an .inf price printed "$inf"); no text longer than MAX_TEXT.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False,
                              str_max_length=MAX_TEXT)

    @field_validator("*", mode="before")
    @classmethod
    def _typed_scalars(cls, v: Any, info: Any) -> Any:
        """true/false only where a boolean goes, and never where a number goes (pydantic would take 'yes' and 1 as
        true, and true as 1): Pulumi reads stack files as YAML 1.2, where yes/no/on/off are text."""
        kind = _scalar_kind(cls.model_fields[info.field_name].annotation)
        if kind is bool and v is not None and not isinstance(v, bool):
            hint = (" (Pulumi reads stack files as YAML 1.2, where yes, no, on and off are text)"
                    if isinstance(v, str) and v in YAML11_BOOLS else "")
            raise ValueError(f"allowed: true or false{hint}")
        if kind in (int, float) and isinstance(v, bool):
            raise ValueError("allowed: a number, not true/false")
        return v


class SystemNodesConfig(Strict):
    """`kimi-k3:cluster.systemNodes`: the node group for controllers and the weights download Job (eks mode)."""

    instance_type: InstanceType = Field("m7i.8xlarge", alias="instanceType",
                               description="12.5 Gbps network: the download Job runs here, at ~1.2 GB/s")
    ami_type: str = Field("AL2023_x86_64_STANDARD", alias="amiType")
    count: int = Field(2, ge=1, le=50)
    disk_gib: int = Field(200, alias="diskGiB", ge=20)

    @field_validator("ami_type")
    @classmethod
    def _known_ami(cls, v: str) -> str:
        known = sorted(recipe_file("aws.yaml")["ami_types"])  # the GPU group's is checked in aws.gpu_node_plan
        if v not in known:
            raise ValueError(f"unknown AMI type{did_you_mean(v, known)}; allowed: {', '.join(known)}")
        return v


class GpuNodesConfig(Strict):
    """`kimi-k3:cluster.gpuNodes`: the GPU node group (eks mode). Its size comes from the recipe."""

    instance_type: Optional[InstanceType] = Field(None, alias="instanceType",
                                         description="default: p6e-<platform>.36xlarge for the recipe's platform")
    ami_type: str = Field("AL2023_ARM_64_NVIDIA", alias="amiType")
    capacity_type: Optional[Literal["CAPACITY_BLOCK", "ON_DEMAND"]] = Field(
        None, alias="capacityType", description="default: CAPACITY_BLOCK for types sold only as Capacity Blocks")
    capacity_reservation_id: Optional[str] = Field(None, alias="capacityReservationId", pattern=allowed_as(r"^cr-[0-9a-f]{8,17}$", "cr- then 8-17 lower-case hex digits, e.g. cr-0123456789abcdef0"),
                                                   description="the Capacity Block's reservation id (cr-...)")
    availability_zone: Zone = Field("us-east-1-dfw-2a", alias="availabilityZone",
                                   description="zone of the reservation (p6e-gb200 Capacity Blocks: Dallas Local Zone)")
    ultra_server_nodes: Literal[9, 18] = Field(18, alias="ultraServerNodes",
                                               description="instances per UltraServer: 9 (x36) or 18 (x72)")
    reservation_nodes: Optional[int] = Field(None, alias="reservationNodes", ge=1,
                                             description="instances in the reservation; default: one UltraServer")
    desired_nodes: Optional[int] = Field(
        None, alias="desiredNodes", ge=0,
        description="node group desired size; default: the recipe's nodes. 0 scales the group to zero, as EKS "
        "requires before a Capacity Block node group is upgraded and advises before the block ends (docs/aws.md)")
    root_volume_gib: int = Field(200, alias="rootVolumeGiB", ge=50)
    imds_hop_limit: Literal[1, 2] = Field(
        1, alias="imdsHopLimit", description="IMDSv2 hop limit on GPU nodes: 1 keeps pods off the node role's "
        "credentials (host-network pods still reach IMDS); 2 only if a pod there needs the node role (none here)")
    rollout_launch_template: bool = Field(
        False, alias="rolloutLaunchTemplate", description="apply launch template changes to the node group; "
        "only with desiredNodes: 0 after an `up` that emptied it (EKS upgrades a Capacity Block node group at "
        "desired size 0). Otherwise a changed template waits as a new version (docs/aws.md)")


class ClusterConfig(Strict):
    """`kimi-k3:cluster`: where the Kubernetes objects go."""

    mode: Literal["eks", "existing", "render"] = Field(
        "render", description="`eks`: build VPC, EKS, node groups, storage and add-ons on AWS; "
        "`existing`: a cluster from kubeconfig/context; `render`: write YAML to renderDir, no cluster")
    context: Optional[str] = Field(None, min_length=1, description="kubeconfig context (existing mode); the kubeconfig itself is the secret `kimi-k3:kubeconfig` or $KUBECONFIG")
    render_dir: str = Field("rendered", alias="renderDir", min_length=1, description="directory for manifests in render mode")
    efa_devices_per_node: Optional[int] = Field(None, alias="efaDevicesPerNode", ge=0,
                                                description="existing/render: EFA devices per GPU node (eks mode: from the instance type)")
    region: str = Field("us-east-1", pattern=allowed_as(r"^[a-z]{2}(-[a-z]+)+-\d$", "an AWS region name, e.g. us-east-1"))
    kubernetes_version: str = Field("1.34", alias="kubernetesVersion", pattern=allowed_as(r"^1\.\d+$", "a quoted Kubernetes minor version, e.g. \"1.34\""))
    vpc_cidr: str = Field("10.64.0.0/16", alias="vpcCidr", pattern=allowed_as(r"^\d+\.\d+\.\d+\.\d+/16$", "an IPv4 /16 CIDR, e.g. 10.64.0.0/16"))
    availability_zones: list[Zone] = Field(["us-east-1a", "us-east-1b"], alias="availabilityZones", min_length=2, max_length=3,
                                          description="zones of the control plane and system nodes (EKS needs two)")
    admin_principal_arns: list[PrincipalArn] = Field(default_factory=list, alias="adminPrincipalArns",
                                            description="IAM principals given cluster-admin access entries")
    public_access_cidrs: list[str] = Field(
        default_factory=list, alias="publicAccessCidrs",
        description="IPv4 CIDRs that may reach the public EKS API endpoint (the private endpoint is always on): "
        "required in eks mode while endpointPublicAccess is true; per user, like the reservation id")
    endpoint_public_access: bool = Field(True, alias="endpointPublicAccess",
                                         description="false: private API endpoint only (pulumi must run in the VPC)")
    allow_public_endpoint_from_anywhere: bool = Field(
        False, alias="allowPublicEndpointFromAnywhere",
        description="accept 0.0.0.0/0 in publicAccessCidrs (the API is then reachable from the whole internet)")
    parked: bool = Field(False, description="eks: keep only the model cache's filesystem and the network it sits in; "
                         "EKS, nodes, NAT, add-ons and the graph are deleted by the next `up` (`make park`), and "
                         "come back onto the same weights when this is false again (docs/aws.md, Teardown)")
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig, alias="systemNodes")
    gpu_nodes: GpuNodesConfig = Field(default_factory=GpuNodesConfig, alias="gpuNodes")

    @field_validator("kubernetes_version")
    @classmethod
    def _dra_ga(cls, v: str) -> str:
        least = recipe_file("aws.yaml")["min_kubernetes_version"]
        if int(v.split(".")[1]) < int(least.split(".")[1]):
            raise ValueError(f"Kubernetes {v} has no resource.k8s.io/v1 (DRA GA); allowed: {least} or later")
        pinned = recipe_file("aws.yaml")["eks_addon_versions"]
        if v not in pinned:
            raise ValueError(f"no pinned EKS add-on versions for Kubernetes {v} (recipes/aws.yaml "
                             f"eks_addon_versions); allowed: {', '.join(sorted(pinned))}, or add a row with its sources")
        return v

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 network ({exc}); allowed: a private /16 such as 10.64.0.0/16") from None
        if not any(net.subnet_of(ipaddress.IPv4Network(r)) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")):
            raise ValueError("not a private range (RFC 1918); allowed: a /16 in 10.0.0.0/8, 172.16.0.0/12 or "
                             "192.168.0.0/16, e.g. 10.64.0.0/16")
        return v

    @field_validator("availability_zones")
    @classmethod
    def _zones(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("a zone listed twice; allowed: two or three different zones, e.g. [us-east-1a, us-east-1b]")
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not an IPv4 CIDR ({exc}); allowed: e.g. 203.0.113.0/24, "
                                 "198.51.100.7/32") from None
        return v


class FsxConfig(Strict):
    """`kimi-k3:storage.fsx`: the FSx for Lustre PERSISTENT_2 filesystem of the model cache."""

    storage_capacity_gib: int = Field(default_factory=lambda: recipe_file("storage.yaml")["fsx_lustre"]["size_gib"],
                                      alias="storageCapacityGiB",
                                      ge=1,
                                      description="1200 or a multiple of 2400 GiB (recipes/aws.yaml); aggregate "
                                      "throughput = TiB x perUnitStorageThroughput, the cold-start lever (docs/aws.md)")
    per_unit_storage_throughput: int = Field(default_factory=lambda: recipe_file("storage.yaml")["fsx_lustre"]["per_unit_mbps_per_tib"],
                                             alias="perUnitStorageThroughput",
                                             description="MB/s per TiB: 125, 250, 500 or 1000 (recipes/aws.yaml)")
    efa_enabled: bool = Field(False, alias="efaEnabled",
                              description="refused: the GPU nodes mount over TCP (no EFA Lustre client is set up)")
    file_system_type_version: str = Field("2.15", alias="fileSystemTypeVersion")
    s3_import_path: Optional[str] = Field(None, alias="s3ImportPath", pattern=allowed_as(r"^s3://[a-z0-9.-]{3,63}(/.*)?$", "s3://bucket/prefix, e.g. s3://my-weights/kimi-k3"),
                                          description="s3://bucket/prefix holding pre-staged weights (data repository association)")

    @field_validator("efa_enabled")
    @classmethod
    def _no_efa_clients(cls, v: bool) -> bool:
        if v:
            raise ValueError("an EFA-enabled file system serves EFA only to clients that run the EFA-enabled Lustre "
                             "client with LNet over EFA (FSx 'Working with EFA-enabled file systems'); kimi-k3 does "
                             "not set that up on the GPU nodes, so they would mount over TCP and gain nothing; "
                             "allowed: false")
        return v

    @field_validator("storage_capacity_gib")
    @classmethod
    def _size(cls, v: int) -> int:
        p2 = recipe_file("aws.yaml")["fsx_persistent_2"]
        small, step = p2["small_size_gib"], p2["size_step_gib"]
        if v != small and (v < step or v % step):
            raise ValueError(f"{v} GiB is not a PERSISTENT_2 size; allowed: {small} or a multiple of {step} "
                             f"({step}, {2 * step}, ...)")
        return v

    @field_validator("per_unit_storage_throughput")
    @classmethod
    def _per_unit(cls, v: int) -> int:
        allowed = recipe_file("aws.yaml")["fsx_persistent_2"]["per_unit_throughputs"]
        if v not in allowed:
            raise ValueError(f"{v} MB/s/TiB is not a PERSISTENT_2 throughput; allowed: {', '.join(map(str, allowed))}")
        return v


class S3Config(Strict):
    """`kimi-k3:storage.s3`: the weights in an S3 bucket of the stack, fetched from the Hub at t=0 by EC2 fetchers
    (independent of the cluster), read by the workers through Mountpoint for Amazon S3 (docs/aws.md)."""

    fetchers: int = Field(4, ge=1, le=32, description="EC2 instances that download disjoint shares of the checkpoint "
                          "from the Hub into the bucket, in parallel")
    fetcher_instance_type: InstanceType = Field("m6in.8xlarge", alias="fetcherInstanceType",
                                       description="x86_64 type of each fetcher, >= 128 GiB memory (staging is "
                                       "a 110 GiB tmpfs); m6in.8xlarge: 32 vCPU, 128 GiB, 50 Gbps network")


class EfsConfig(Strict):
    """`kimi-k3:storage.efs`: an EFS filesystem (smaller setup, ~1.5 GB/s per client: slow for 1.5 TB)."""

    throughput_mode: Literal["elastic", "bursting"] = Field("elastic", alias="throughputMode")


class StorageConfig(Strict):
    """`kimi-k3:storage`: the ReadWriteMany volume that caches the checkpoint."""

    kind: Optional[Literal["s3", "fsx-lustre", "efs", "existing"]] = Field(
        None, description="s3 (default in eks mode: bucket + Mountpoint), fsx-lustre, efs, or existing (a "
        "storageClass); default: existing when storageClass is set")
    storage_class: Optional[str] = Field(None, alias="storageClass", pattern=allowed_as(DNS_LABEL.replace("{0,61}", "{0,252}"), "a StorageClass name: lower-case letters, digits and '-', e.g. fsx-sc"),
                                         description="StorageClass of the model-cache PVC (kind existing); must support ReadWriteMany")
    provisioner: Optional[str] = Field(None, description="the class's provisioner, when known, to reject block storage")
    size_gi: Optional[int] = Field(None, alias="sizeGi", ge=1, description="PVC size; default: checkpoint size plus headroom")
    headroom_percent: int = Field(25, alias="headroomPercent", ge=0, le=400, description="space over the checkpoint size for partial downloads and metadata")
    fsx: FsxConfig = Field(default_factory=FsxConfig)
    efs: EfsConfig = Field(default_factory=EfsConfig)
    s3: S3Config = Field(default_factory=S3Config)
    compile_cache: Optional[Literal["efs", "none"]] = Field(
        None, alias="compileCache", description="shared volume for DeepGEMM/FlashInfer/torch.compile/Triton caches, "
        "keyed by image and flags: efs (default in eks mode) or none (pod-local, every start compiles)")
    node_local_weights: Optional[bool] = Field(
        None, alias="nodeLocalWeights", description="copy the verified checkpoint onto every GPU node's instance-store "
        "NVMe before the workers start (the weights-prefetch DaemonSet; each byte crosses the Local Zone link once) "
        "and load it from there: default true in eks mode (its GPU nodes have the RAID0), false elsewhere")

    @model_validator(mode="after")
    def _rwx_capable(self) -> "StorageConfig":
        if self.provisioner in RWO_ONLY_PROVISIONERS or self.storage_class in RWO_ONLY_CLASS_NAMES:
            what = f"provisioner {self.provisioner}" if self.provisioner in RWO_ONLY_PROVISIONERS else "that class"
            raise ValueError(
                f"storage class {self.storage_class!r} is not ReadWriteMany-capable ({what} is block storage); "
                "use a shared filesystem class (FSx for Lustre, EFS, Filestore, Azure Files, NFS)")
        return self

    def resolved_compile_cache(self, mode: str) -> str:
        """efs (a shared volume of the stack) in eks mode unless turned off; none elsewhere."""
        return self.compile_cache or ("efs" if mode == "eks" and self.resolved_kind != "existing" else "none")

    def resolved_node_local_weights(self, mode: str) -> bool:
        """Only eks mode knows where the GPU nodes' instance store is mounted (its launch template builds the RAID0)."""
        return mode == "eks" and (self.node_local_weights is not False)

    @property
    def resolved_kind(self) -> str:
        return self.kind or ("existing" if self.storage_class else "s3")


class AddonConfig(Strict):
    """`kimi-k3:platform.<addon>`: install it (a helm release) or assume it present; its pinned chart version."""

    install: Optional[bool] = Field(None, description="default: true in eks mode, false otherwise (assumed present)")
    version: Optional[str] = Field(None, pattern=allowed_as(r"^v?\d+\.\d+\.\d+([-+][\w.]+)?$", "a chart version, e.g. 1.5.0 or v25.3.4"),
                                   description="chart version; default: recipes/addons.yaml")
    values: dict[str, Any] = Field(default_factory=dict, description="deep-merged over recipes/addons.yaml values")


class PlatformConfig(Strict):
    """`kimi-k3:platform`: the GPU/DRA/Dynamo add-ons the serving graph needs."""

    gpu_operator: AddonConfig = Field(default_factory=AddonConfig, alias="gpuOperator")
    efa_device_plugin: AddonConfig = Field(default_factory=AddonConfig, alias="efaDevicePlugin")
    dra_driver: AddonConfig = Field(default_factory=AddonConfig, alias="draDriver")
    dynamo_platform: AddonConfig = Field(default_factory=AddonConfig, alias="dynamoPlatform")


class EstimatesConfig(Strict):
    """`kimi-k3:estimates`: overrides of recipes/durations.yaml for the critical-path report."""

    download_gbps: Optional[float] = Field(None, alias="downloadGbps", gt=0,
                                           description="Hugging Face download per fetcher (or download Job), GB/s")
    local_zone_link_gbps: Optional[float] = Field(None, alias="localZoneLinkGbps", gt=0,
                                                  description="Local Zone <-> Region bandwidth for all GPU nodes, GB/s")
    seconds: dict[str, float] = Field(default_factory=dict, description="per-key duration overrides")

    @field_validator("seconds")
    @classmethod
    def _known_steps(cls, v: dict[str, float]) -> dict[str, float]:
        known = sorted(recipe_file("durations.yaml")["seconds"])  # an unknown step would be silently unused
        for step, value in v.items():
            if step not in known:
                raise ValueError(f"unknown step {shown(step)}{did_you_mean(step, known)}; allowed: {', '.join(known)}")
            if value < 0:
                raise ValueError(f"seconds.{step} = {value:g}: a duration; allowed: 0 or more seconds")
        return v


class ModelConfig(Strict):
    """`kimi-k3:model`: which checkpoint, and where it lives in the cache."""

    repo: str = Field("moonshotai/Kimi-K3", pattern=allowed_as(r"^[\w.-]+/[\w.-]+$", "a Hugging Face repo id OWNER/NAME, e.g. moonshotai/Kimi-K3"))
    # A commit, never a branch or tag: `main` moves, and every fetcher, check and node copy must see the same bytes.
    revision: Optional[str] = Field(None, pattern=allowed_as(r"^[0-9a-f]{40}$", "the 40-hex commit sha of the Hub repository (a branch or tag such as main moves), e.g. the sha `hf api` / the repo's commit history shows"),
                                    description="Hugging Face commit sha (40 hex); required: the weights are pinned")
    served_model_name: str = Field("moonshotai/Kimi-K3", alias="servedModelName", pattern=allowed_as(
        r"^[A-Za-z0-9_][A-Za-z0-9_./:-]*$", "a model name of letters, digits, '_', '.', '/', ':', '-', e.g. "
        "moonshotai/Kimi-K3 (clients send it as `model`)"), max_length=256)
    cache_mount_path: str = Field("/model-cache", alias="cacheMountPath", pattern=allowed_as(r"^/[\w./-]*$", "an absolute path of letters, digits, '.', '_', '-', e.g. /model-cache"))
    download_image: str = Field("python:3.12.11-slim-bookworm", alias="downloadImage",
                                description="image for the download Job (Docker Hub official python image)")

    @field_validator("cache_mount_path")
    @classmethod
    def _own_directory(cls, v: str) -> str:
        parts = v.rstrip("/").split("/")[1:]
        if not parts or any(p in ("", ".", "..") for p in parts):
            raise ValueError("allowed: a directory of its own, e.g. /model-cache (not /, no '.', '..' or '//'): "
                             "the volume is mounted over it and hides what the image has there")
        if parts[0] in SYSTEM_DIRS:
            raise ValueError(f"/{parts[0]} belongs to the image or the kubelet; allowed: a directory of its own, "
                             "e.g. /model-cache")
        return v

    @field_validator("download_image")
    @classmethod
    def _download_pinned(cls, v: str) -> str:
        from .images import pin_problem
        problem = pin_problem(v)
        if problem:
            raise ValueError(f"{problem}; allowed: a version tag or a digest, e.g. python:3.12.11-slim-bookworm")
        return v
    hub_version: str = Field("1.16.4", alias="hubVersion", pattern=allowed_as(r"^\d+\.\d+\.\d+$", "a version MAJOR.MINOR.PATCH, e.g. 1.16.4"),
                             description="huggingface_hub version the Job installs (upstream model-download.yaml pins 1.16.4)")


# Top-level directories a volume mount would hide or that the kubelet owns (the Linux FHS, Kubernetes' /var/run).
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "proc", "run", "sbin", "sys", "usr", "var"}
FLAG_NAME = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # Kubernetes' rule for env var names (IsEnvVarName)


def check_flags(v: dict[str, FlagValue]) -> dict[str, FlagValue]:
    """A flag map of a role or the frontend: long flag names; no negative numbers, empty text or NaN as values."""
    for flag, value in v.items():
        if not FLAG_NAME.match(flag):
            raise ValueError(f"extra arg {shown(flag)} must be a long flag starting with '--' (lower-case letters, "
                             "digits and '-'; its value goes in the value, not after '=')")
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
            if not value.strip():
                raise ValueError(f"{flag} = {shown(value)}: empty; allowed: a value, true for a bare flag, or null "
                                 "to drop it")
        if number is not None and (not math.isfinite(number) or number < 0):
            raise ValueError(f"{flag} = {shown(value)}: vLLM and Dynamo take counts, sizes and fractions here; "
                             "allowed: a finite number >= 0")
    return v


def check_env(v: dict[str, Optional[str]]) -> dict[str, Optional[str]]:
    for name in v:
        if not ENV_NAME.match(name):
            raise ValueError(f"env name {shown(name)}: allowed: letters, digits, '_', '-', '.', not starting with a "
                             "digit (Kubernetes refuses others)")
    return v


class RoleOverride(Strict):
    """`kimi-k3:serving.roles.<role>`: per-role overrides of the recipe."""

    replicas: Optional[int] = Field(None, ge=0)
    tp: Optional[int] = Field(None, ge=1, description="tensor-parallel size; must fill whole nodes")
    nodes_per_replica: Optional[int] = Field(None, alias="nodesPerReplica", ge=1)
    dcp: Optional[int] = Field(None, ge=1, description="vLLM decode context parallel size (divides tp; recipes/dcp.yaml)")
    gpu_memory_utilization: Optional[float] = Field(None, alias="gpuMemoryUtilization", gt=0, le=1)
    shared_memory_size: Optional[Quantity] = Field(None, alias="sharedMemorySize")
    extra_args: dict[str, FlagValue] = Field(default_factory=dict, alias="extraArgs")
    env: dict[str, Optional[str]] = Field(default_factory=dict)

    _flags = field_validator("extra_args")(classmethod(lambda cls, v: check_flags(v)))
    _env = field_validator("env")(classmethod(lambda cls, v: check_env(v)))


class FrontendOverride(Strict):
    replicas: Optional[int] = Field(None, ge=1)
    # Dynamo's --migration-limit (a u32, 0 = off); default recipes/request-migration.yaml
    migration_limit: Optional[int] = Field(None, alias="migrationLimit", ge=0, le=2**32 - 1)
    extra_args: dict[str, FlagValue] = Field(default_factory=dict, alias="extraArgs")
    env: dict[str, Optional[str]] = Field(default_factory=dict)

    _flags = field_validator("extra_args")(classmethod(lambda cls, v: check_flags(v)))
    _env = field_validator("env")(classmethod(lambda cls, v: check_env(v)))


class RolloutConfig(Strict):
    """`kimi-k3:serving.rollout`: how an update rolls through the workers (docs/operating.md#rollouts)."""

    surge: int = Field(0, ge=0, le=2, description="extra replicas of every worker role while a rollout is staged; "
                       "Grove recreates one replica at a time (RollingRecreate, no maxSurge), so a role with one "
                       "replica has no serving replica during its rollout unless surged")


class PreflightConfig(Strict):
    """`kimi-k3:serving.preflight`: the fabric check that runs on the GPU nodes before workers load weights."""

    enabled: bool = True
    min_bus_bandwidth_gbps: float = Field(300.0, alias="minBusBandwidthGBps", gt=0,
                                          description="NCCL all-reduce bus bandwidth a TP group must reach (GB/s)")
    timeout_seconds: int = Field(1800, alias="timeoutSeconds", ge=60)


# AIPerf's own image, at the version the rehearsal runs (requirements-rehearse.txt): the image `aiperf kube` 0.13.0
# deploys (aiperf/cli_commands/kube/_kube_common.py, pin_default_direct_image: nvcr.io/nvidia/aiperf:<version>).
BENCHMARK_IMAGE = "nvcr.io/nvidia/aiperf:0.13.0"


class BenchmarkConfig(Strict):
    """`kimi-k3:serving.benchmark`: after the smoke test, an AIPerf Job runs the rehearsal's workload
    (kimi_k3/workload.py) against the frontend Service; off by default. Results: `kubectl logs job/kimi-k3-benchmark`."""

    enabled: bool = Field(False, description="run the AIPerf benchmark Job after the smoke test (`pulumi up` waits "
                          "for it and fails if a run fails)")
    image: str = Field(BENCHMARK_IMAGE, min_length=1, description="AIPerf image (a pinned tag or digest)")
    requests: int = Field(workload.DEFAULT.requests, ge=1, le=10000, description="requests per run")
    duration_seconds: float = Field(workload.DEFAULT.duration_seconds, alias="durationSeconds", gt=0, le=3600,
                                    description="time cap per run (AIPerf --benchmark-duration)")
    concurrency: int = Field(workload.DEFAULT.concurrency, ge=1, le=1024, description="requests in flight")
    system_prompt_tokens: int = Field(workload.DEFAULT.system_prompt_tokens, alias="systemPromptTokens", ge=0,
                                      le=262144, description="shared system prompt of the agentic run, in tokens")
    turns: int = Field(workload.DEFAULT.turns, ge=1, le=64, description="turns per agentic conversation")
    runs: list[Literal["agentic", "synthetic"]] = Field(list(workload.RUNS), min_length=1,
                                                        description="which runs, in order")

    @field_validator("image")
    @classmethod
    def _pinned(cls, v: str) -> str:
        from .images import pin_problem
        problem = pin_problem(v)
        if problem:
            raise ValueError(f"{problem}; allowed: a version tag or a digest, e.g. {BENCHMARK_IMAGE}")
        return v

    @field_validator("runs")
    @classmethod
    def _once_each(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"each run at most once; allowed: a list from {', '.join(workload.RUNS)}")
        return v

    def to_workload(self) -> "workload.Workload":
        return workload.Workload(requests=self.requests, duration_seconds=self.duration_seconds,
                                 concurrency=self.concurrency, system_prompt_tokens=self.system_prompt_tokens,
                                 turns=self.turns, runs=tuple(self.runs))


class AutoscalingConfig(Strict):
    """`kimi-k3:serving.autoscaling`: Dynamo's SLA planner owns the worker replicas (docs/operating.md#autoscaling)."""

    enabled: bool = Field(False, description="add Dynamo's SLA planner to the graph; it owns the worker roles' replicas")
    ttft_ms: Optional[float] = Field(None, alias="ttftMs", gt=0, description="TTFT target (ms) the planner holds; "
                                     "required when enabled")
    itl_ms: Optional[float] = Field(None, alias="itlMs", gt=0, description="inter-token latency target (ms); "
                                    "required when enabled")
    min_replicas: dict[str, int] = Field(default_factory=dict, alias="minReplicas",
                                         description="per role, the replicas the planner never goes below; default: "
                                         "the role's configured replicas")
    max_gpu_budget: Optional[int] = Field(None, alias="maxGpuBudget", ge=1,
                                          description="GPUs the planner may use; default (eks): the Capacity Block's "
                                          "instances x GPUs per instance; required on other clusters")
    adjustment_interval_seconds: int = Field(180, alias="adjustmentIntervalSeconds", ge=10,
                                             description="seconds between the planner's scaling decisions")
    prometheus_endpoint: Optional[str] = Field(
        None, alias="prometheusEndpoint", pattern=allowed_as(r"^https?://[^\s]+$", "an http(s) URL, e.g. http://prometheus.monitoring.svc:9090"),
        description="Prometheus that scrapes the frontend; default with kimi-k3:monitoring.stack install: its own")
    image: Optional[str] = Field(None, min_length=1, description="planner image; default: recipes/autoscaling.yaml")

    @field_validator("image")
    @classmethod
    def _planner_pinned(cls, v: Optional[str]) -> Optional[str]:
        from .images import pin_problem
        problem = v is not None and pin_problem(v)
        if problem:
            raise ValueError(f"{problem}; allowed: a version tag or a digest")
        return v

    @field_validator("min_replicas")
    @classmethod
    def _at_least_one(cls, v: dict[str, int]) -> dict[str, int]:
        for role, n in v.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"minReplicas.{role} = {n!r}: a graph without one of its roles serves nothing; "
                                 "allowed: a whole number >= 1")
        return v


class ServingConfig(Strict):
    """`kimi-k3:serving`: the serving graph's knobs and overrides of the recipe."""

    namespace: str = Field("kimi-k3", pattern=allowed_as(DNS_LABEL, "a DNS label: up to 63 lower-case letters, digits and '-', e.g. kimi-k3"))
    image: Optional[str] = Field(None, min_length=1, description="replaces the recipe's runtime image (all roles)")
    runtime_version: Optional[str] = Field(None, alias="runtimeVersion", description="semver of the image for runtimeVersionOverride")
    pd_ratio: Optional[str] = Field(None, alias="pdRatio", pattern=allowed_as(r"^[0-9]+:[0-9]+$", "PREFILL:DECODE replicas as a quoted string, e.g. \"1:2\""),
                                    description="prefill:decode replicas, e.g. 1:2 (disaggregated recipes only)")
    startup_probe_seconds: int = Field(7200, alias="startupProbeSeconds", ge=60,
                                       description="startup probe budget of each worker (weights load + warmup)")
    ready_timeout_seconds: int = Field(14400, alias="readyTimeoutSeconds", ge=60,
                                       description="how long `pulumi up` waits for the graph to be Ready")
    download_timeout_seconds: int = Field(28800, alias="downloadTimeoutSeconds", ge=60,
                                          description="how long `pulumi up` waits for the weights download and check")
    smoke_test: bool = Field(True, alias="smokeTest",
                             description="after the graph is Ready, run the smoke test Job; `pulumi up` fails if it does")
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    frontend: FrontendOverride = Field(default_factory=FrontendOverride)
    roles: dict[str, RoleOverride] = Field(default_factory=dict)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    preflight: PreflightConfig = Field(default_factory=PreflightConfig)
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)


class AlertsConfig(Strict):
    """`kimi-k3:monitoring.alerts`: thresholds of the alert rules (defaults in recipes/monitoring.yaml)."""

    ttft_p95_seconds: Optional[float] = Field(None, alias="ttftP95Seconds", gt=0)
    itl_p95_seconds: Optional[float] = Field(None, alias="itlP95Seconds", gt=0)
    max_queued_requests: Optional[int] = Field(None, alias="maxQueuedRequests", ge=0)
    max_kv_cache_usage_percent: Optional[float] = Field(None, alias="maxKvCacheUsagePercent", gt=0, le=100)


class MonitoringConfig(Strict):
    """`kimi-k3:monitoring`: install kube-prometheus-stack, use the cluster's own, or add nothing."""

    stack: Optional[Literal["install", "existing", "none"]] = Field(
        None, description="default: install, except on an existing cluster, whose add-ons (monitoring too) are assumed "
        "present")
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)


class PricingConfig(Strict):
    """`kimi-k3:pricing`: what one GPU instance costs, with where that number comes from."""

    instance_hour_usd: float = Field(alias="instanceHourUsd", gt=0)
    source: str = Field(min_length=1)
    as_of: str = Field(alias="asOf", pattern=allowed_as(r"^\d{4}-\d{2}(-\d{2})?$", "a quoted date YYYY-MM or YYYY-MM-DD, e.g. \"2026-10\""))


class StackConfig(Strict):
    """Everything under the `kimi-k3:` namespace of a stack."""

    recipe: Literal["gb200", "gb200-disagg", "gb300", "gb300-disagg"]
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    platform: PlatformConfig = Field(default_factory=PlatformConfig)
    estimates: EstimatesConfig = Field(default_factory=EstimatesConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    pricing: Optional[PricingConfig] = None
    hf_token_set: bool = Field(False, alias="hfToken")
    kubeconfig_set: bool = Field(False, alias="kubeconfig")


def addon_key(field_name: str) -> str:
    """python field name -> the config key: gpu_operator -> gpuOperator."""
    head, *rest = field_name.split("_")
    return head + "".join(p.title() for p in rest)


def _key_of(loc: tuple[Any, ...]) -> str:
    """pydantic location -> the config key a user types, e.g. kimi-k3:serving.roles.decode.replicas."""
    names = [str(p) for p in loc if not str(p).startswith(("function-", "literal["))]
    names = [n if len(n) <= 80 else f"{n[:80]}... ({len(n):,} characters)" for n in names]  # a pasted blob as a key
    if not names:
        return f"{NAMESPACE}:<stack>"
    return f"{NAMESPACE}:{names[0]}" + "".join(f".{n}" for n in names[1:])


def _yaml_number_hint(value: Any) -> str:
    """Why a number reached a text field: YAML reads an unquoted 1.30 as the float 1.3."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""
    return (f" (YAML read the unquoted value as the number {value!r}"
            + (", dropping trailing zeros: 1.30 becomes 1.3; quote it in the stack file, e.g. \"1.30\")"
               if isinstance(value, float) else f"; quote it in the stack file, e.g. \"{value}\")"))


GO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)? [-+]\d{4} ")  # yaml_strict: an unquoted timestamp


def _yaml_text_hint(value: Any) -> str:
    """Why text reached a number field or broke a pattern: YAML 1.2 words and timestamps, as Pulumi reads them."""
    if isinstance(value, str) and value in YAML11_BOOLS:
        return f" (Pulumi reads stack files as YAML 1.2, where {value} is text, not a boolean)"
    if isinstance(value, str) and GO_TIME.match(value):
        return (f" (YAML read the unquoted date as a timestamp, which Pulumi passes as {value!r}; quote it in the "
                f"stack file, e.g. \"{value[:10]}\")")
    return ""


def echo(value: Any, limit: int = 120) -> str:
    """A value as JSON for a message, cut to `limit` characters with a note of its length."""
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return text
    length = len(value) if isinstance(value, (str, list, dict)) else len(text)
    unit = "characters" if isinstance(value, str) else "items" if isinstance(value, (list, dict)) else "characters"
    return f"{text[:limit]}... ({length:,} {unit})"


def _message(e: dict[str, Any], siblings: list[str]) -> str:
    """One validation error in words: what is wrong and what is allowed (never a raw regex)."""
    kind, msg, ctx = e["type"], e["msg"].removeprefix("Value error, "), e.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        return "allowed: " + PATTERN_ALLOWED.get(ctx.get("pattern", ""), f"a value matching {ctx.get('pattern')}") \
            + _yaml_text_hint(e.get("input"))
    if kind in ("int_parsing", "float_parsing", "int_type", "float_type"):
        return msg + _yaml_text_hint(e.get("input"))
    if kind == "finite_number":
        return "allowed: a finite number (not .inf, inf or nan)"
    if kind == "string_too_long":
        return f"allowed: at most {ctx.get('max_length')} characters"
    if kind == "string_type":
        return "must be text" + _yaml_number_hint(e.get("input"))
    if kind == "literal_error":
        return "allowed: " + str(ctx.get("expected", msg)).replace("'", "")
    if kind == "model_type" or kind == "dict_type":
        return "must be a mapping of keys to values" + (f"; allowed keys: {', '.join(siblings)}" if siblings else "")
    return msg


def _field_names(model: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys a user may write where `loc` points (for 'unknown key' and 'must be a mapping' messages)."""
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(str(part)) or next(
            (f for f in getattr(model, "model_fields", {}).values() if f.alias == str(part)), None)
        if field is None:
            return []
        inner = [a for a in [field.annotation, *typing_args(field.annotation)] if isinstance(a, type)
                 and issubclass(a, BaseModel)]
        if not inner:
            return []
        model = inner[0]
    return sorted((f.alias or n) for n, f in getattr(model, "model_fields", {}).items())


def typing_args(annotation: Any) -> list[Any]:
    import typing
    out = []
    for a in typing.get_args(annotation):
        out += [a, *typing.get_args(a)]
    return out


def format_validation_error(err: ValidationError, model: Any = None) -> str:
    lines = []
    for e in err.errors():
        key = _key_of(e["loc"])
        if e["type"] == "extra_forbidden":
            known = _field_names(model, e["loc"]) if model is not None else []
            hint = did_you_mean(str(e["loc"][-1]), known) + (f"; allowed keys: {', '.join(known)}" if known else
                                                             " (check the spelling against the README's configuration reference)")
            lines.append(f"{key}: unknown key{hint}")
        elif e["type"] == "missing":
            lines.append(f"{key}: required but not set")
        else:
            siblings = _field_names(model, (*e["loc"], "")) if model is not None else []
            lines.append(f"{key} = {echo(e.get('input'))}: {_message(e, siblings)}")
    return "invalid stack configuration:\n  " + "\n  ".join(lines)


def check_modes(cfg: StackConfig) -> None:
    """Cross-key rules: storage kind and add-on installs that the cluster mode can honour."""
    kind, mode = cfg.storage.resolved_kind, cfg.cluster.mode
    if cfg.model.revision is None:
        raise ConfigError(f"kimi-k3:model.revision: required but not set; allowed: the 40-hex commit sha of "
                          f"{cfg.model.repo} to serve (a branch such as main moves, and fetchers, checks and node copies "
                          f"would each see other bytes); e.g. pulumi config set --path kimi-k3:model.revision <sha>")
    if kind == "existing" and not cfg.storage.storage_class:
        raise ConfigError("kimi-k3:storage.storageClass: required when kimi-k3:storage.kind is existing; "
                          "allowed: the name of a ReadWriteMany StorageClass")
    if kind != "existing" and mode != "eks":
        raise ConfigError(f"kimi-k3:storage.kind = {kind!r}: created by this program only in kimi-k3:cluster.mode eks "
                          f"(mode is {mode!r}); allowed here: existing, with kimi-k3:storage.storageClass")
    if cfg.cluster.parked and mode != "eks":
        raise ConfigError(f"kimi-k3:cluster.parked = true: only eks mode builds (and can park) a cluster; mode is "
                          f"{mode!r}; allowed: false (`pulumi destroy` keeps the model-cache PVC and its namespace)")
    if cfg.storage.compile_cache == "efs" and (mode != "eks" or kind == "existing"):
        raise ConfigError(f"kimi-k3:storage.compileCache = 'efs': created by this program only in kimi-k3:cluster.mode "
                          f"eks with a storage kind it creates (mode {mode!r}, kind {kind!r}); allowed here: none")
    st = cfg.storage
    if kind != "existing" and (st.storage_class or st.provisioner):
        key = "storageClass" if st.storage_class else "provisioner"
        raise ConfigError(f"kimi-k3:storage.{key} = {shown(st.storage_class or st.provisioner)}: used only with "
                          f"kimi-k3:storage.kind existing; kind {kind!r} creates its own volume and would ignore it; "
                          "allowed: remove it, or kind existing")
    for block, owner in (("fsx", "fsx-lustre"), ("efs", "efs"), ("s3", "s3")):
        if block in st.model_fields_set and kind != owner:
            raise ConfigError(f"kimi-k3:storage.{block}: settings of storage kind {owner}, but kind is {kind!r} and "
                              f"would ignore them; allowed: remove kimi-k3:storage.{block}, or kind {owner}")
    if st.node_local_weights and mode != "eks":
        raise ConfigError(f"kimi-k3:storage.nodeLocalWeights = true: only eks mode knows the GPU nodes' instance "
                          f"store (mode is {mode!r}); allowed here: false")
    if mode == "eks" and cfg.cluster.efa_devices_per_node is not None:
        raise ConfigError(f"kimi-k3:cluster.efaDevicesPerNode = {cfg.cluster.efa_devices_per_node}: eks mode takes "
                          "EFA devices from the instance type and would ignore it; allowed: remove it (or mode existing)")
    sv = cfg.serving
    if sv.ready_timeout_seconds < sv.startup_probe_seconds:
        raise ConfigError(f"kimi-k3:serving.readyTimeoutSeconds = {sv.ready_timeout_seconds}: `pulumi up` would stop "
                          f"waiting before the workers' startup probe (kimi-k3:serving.startupProbeSeconds = "
                          f"{sv.startup_probe_seconds}) gives up; allowed: {sv.startup_probe_seconds} or more")
    check_download_timeout(cfg)
    if mode == "render":
        for key, addon in cfg.platform:
            if addon.install:
                raise ConfigError(f"kimi-k3:platform.{addon_key(key)}.install = true: helm releases need a cluster; "
                                  "allowed in render mode: false (the add-on is assumed present)")


def check_download_timeout(cfg: StackConfig) -> None:
    """downloadTimeoutSeconds must fit the checkpoint at the rated rate of the download and the storage it fills."""
    from . import planner  # planner reads this module's types
    st, kind = cfg.storage, cfg.storage.resolved_kind
    if kind == "fsx-lustre" and st.fsx.s3_import_path:
        return  # pre-staged: the Job only verifies
    d, facts = recipe_file("durations.yaml"), recipe_file("storage.yaml")
    checkpoint = planner.checkpoint_bytes(planner.load_model_facts())
    start = 0.0
    if kind == "s3":
        rate = st.s3.fetchers * (cfg.estimates.download_gbps or d["download_gbps"])
        start = {**d["seconds"], **cfg.estimates.seconds}["fetcher_start"]
        what = f"{st.s3.fetchers} fetchers at {cfg.estimates.download_gbps or d['download_gbps']:g} GB/s each"
    else:
        rate = cfg.estimates.download_gbps or d["download_job_gbps"]
        what = f"the download Job at {rate:g} GB/s (recipes/durations.yaml download_job_gbps)"
        if kind == "fsx-lustre":
            fsx = st.fsx.storage_capacity_gib / 1024 * st.fsx.per_unit_storage_throughput / 1000
            if fsx < rate:
                rate, what = fsx, (f"FSx for Lustre {st.fsx.storage_capacity_gib} GiB x "
                                   f"{st.fsx.per_unit_storage_throughput} MB/s per TiB")
        elif kind == "efs" and facts["efs"]["per_client_gbps"] < rate:
            rate, what = facts["efs"]["per_client_gbps"], "EFS, per client (recipes/storage.yaml)"
    need = start + checkpoint / (rate * 1e9)
    timeout = cfg.serving.download_timeout_seconds
    if timeout < need:
        raise ConfigError(f"kimi-k3:serving.downloadTimeoutSeconds = {timeout}: the {checkpoint / 1e12:.2f} TB "
                          f"checkpoint takes at least {need:,.0f} s at {rate:.3g} GB/s ({what}, kimi-k3:storage.kind "
                          f"{kind}); allowed: {math.ceil(need)} or more, or a faster storage setting")


def namespaced(config: dict[str, Any], label: str) -> dict[str, Any]:
    """A stack file's `config:` with bare keys in the project's namespace, as Pulumi reads it
    (pulumi/pulumi sdk/go/common/workspace/loaders.go stackConfigNamespacedWithProject)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        full = key if ":" in str(key) else f"{NAMESPACE}:{key}"
        if full in out or (full != key and full in config):  # Pulumi would keep one of the two at random (a Go map)
            raise ConfigError(f"{label}: {key!r} and {full!r} are the same key (Pulumi puts a bare key in the "
                              "project's namespace); allowed: one of them")
        out[full] = value
    return out


def parse_stack_config(raw: dict[str, Any], secret_keys: set[str]) -> StackConfig:
    """Validate a `{"kimi-k3:key": value}` mapping (values may be JSON strings, as Pulumi passes them).

    `secret_keys` are the full keys the engine marks secret: a token set without `--secret` is rejected."""
    fields: dict[str, Any] = {}
    for full_key, value in sorted(raw.items()):
        ns, _, key = full_key.partition(":")
        if ns not in (NAMESPACE, *OTHER_NAMESPACES):
            # A misspelt project namespace would drop the whole block and silently fall back to defaults.
            raise ConfigError(f"{full_key}: unknown config namespace {ns!r}{did_you_mean(ns, [NAMESPACE])}; "
                              f"allowed: {NAMESPACE} (this project), {', '.join(OTHER_NAMESPACES)}")
        if ns != NAMESPACE:
            continue
        if key in SECRET_KEYS:
            if value not in (None, "") and full_key not in secret_keys:
                raise ConfigError(
                    f"{full_key}: stored in plaintext; remove it and run `pulumi config set --secret {full_key} ...`")
            fields[key] = value not in (None, "")
            continue
        if isinstance(value, str) and value.startswith(("{", "[")):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{full_key}: not valid JSON/YAML structure ({exc})") from None
        fields[key] = value
    try:
        cfg = StackConfig.model_validate(fields)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, StackConfig)) from None
    check_modes(cfg)
    aws_region = raw.get("aws:region")  # the AWS provider's region; every AWS resource lands there
    if cfg.cluster.mode == "eks" and aws_region and aws_region != cfg.cluster.region:
        raise ConfigError(f"{NAMESPACE}:cluster.region = {cfg.cluster.region!r}: differs from aws:region = "
                          f"{aws_region!r}, where the AWS provider creates everything; set both to the same region")
    if not cfg.hf_token_set:
        raise ConfigError(
            f"{NAMESPACE}:hfToken: required but not set; run `pulumi config set --secret {NAMESPACE}:hfToken hf_...` "
            "(a Hugging Face read token; it is stored encrypted and reaches the cluster only as a Secret)")
    return cfg
