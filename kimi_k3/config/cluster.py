"""stack.py -> cluster.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal, Optional

from pydantic import Field, field_validator

from kimi_k3.config.base import DNS_LABEL, ConfigError, InstanceType, Strict, Zone, allowed_as
from kimi_k3.config.gke import GkeConfig
from kimi_k3.data import recipe_file
from kimi_k3.errors import did_you_mean

PrincipalArn = Annotated[
    str,
    Field(
        pattern=allowed_as(
            r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:[\w+=,.@/-]+$",
            "an IAM role or user ARN, e.g. arn:aws:iam::123456789012:role/admin",
        )
    ),
]


class SystemNodesConfig(Strict):
    """`kimi-k3:cluster.systemNodes`: the node group for controllers and the weights download Job (eks mode)."""

    instance_type: InstanceType = Field(
        "m7i.8xlarge", alias="instanceType", description="12.5 Gbps network: the download Job runs here, at ~1.2 GB/s"
    )
    ami_type: str = Field("AL2023_x86_64_STANDARD", alias="amiType")
    count: int = Field(2, ge=1, le=50)
    disk_gib: int = Field(200, alias="diskGiB", ge=20)

    @field_validator("ami_type")
    @classmethod
    def _known_ami(cls, v: str) -> str:
        known = sorted(recipe_file("facts/aws.yaml")["ami_types"])  # the GPU group's is checked in aws.gpu_node_plan
        if v not in known:
            raise ValueError(f"unknown AMI type{did_you_mean(v, known)}; allowed: {', '.join(known)}")
        return v


class GpuNodesConfig(Strict):
    """`kimi-k3:cluster.gpuNodes`: the GPU node group (eks mode). Its size comes from the recipe."""

    instance_type: Optional[InstanceType] = Field(
        None, alias="instanceType", description="default: p6e-<platform>.36xlarge for the recipe's platform"
    )
    ami_type: str = Field("AL2023_ARM_64_NVIDIA", alias="amiType")
    capacity_type: Optional[Literal["CAPACITY_BLOCK", "ON_DEMAND"]] = Field(
        None, alias="capacityType", description="default: CAPACITY_BLOCK for types sold only as Capacity Blocks"
    )
    capacity_reservation_id: Optional[str] = Field(
        None,
        alias="capacityReservationId",
        pattern=allowed_as(r"^cr-[0-9a-f]{8,17}$", "cr- then 8-17 lower-case hex digits, e.g. cr-0123456789abcdef0"),
        description="the Capacity Block's reservation id (cr-...)",
    )
    availability_zone: Zone = Field(
        "us-east-1-dfw-2a",
        alias="availabilityZone",
        description="zone of the reservation (p6e-gb200 Capacity Blocks: Dallas Local Zone)",
    )
    ultra_server_nodes: Literal[9, 18] = Field(
        18, alias="ultraServerNodes", description="instances per UltraServer: 9 (x36) or 18 (x72)"
    )
    reservation_nodes: Optional[int] = Field(
        None, alias="reservationNodes", ge=1, description="instances in the reservation; default: one UltraServer"
    )
    desired_nodes: Optional[int] = Field(
        None,
        alias="desiredNodes",
        ge=0,
        description="node group desired size; default: the recipe's nodes. 0 scales the group to zero, as EKS "
        "requires before a Capacity Block node group is upgraded and advises before the block ends (docs/aws.md)",
    )
    root_volume_gib: int = Field(200, alias="rootVolumeGiB", ge=50)
    imds_hop_limit: Literal[1, 2] = Field(
        1,
        alias="imdsHopLimit",
        description="IMDSv2 hop limit on GPU nodes: 1 keeps pods off the node role's "
        "credentials (host-network pods still reach IMDS); 2 only if a pod there needs the node role (none here)",
    )
    rollout_launch_template: bool = Field(
        False,
        alias="rolloutLaunchTemplate",
        description="apply launch template changes to the node group; "
        "only with desiredNodes: 0 after an `up` that emptied it (EKS upgrades a Capacity Block node group at "
        "desired size 0). Otherwise a changed template waits as a new version (docs/aws.md)",
    )


# An object name (RFC 1123 subdomain, '.' allowed): the ComputeDomain's and its channel template's.
OBJECT_NAME = allowed_as(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
    "a Kubernetes object name: lower-case letters, digits, '-' and '.', at most 253, e.g. s0-011-us-west-01",
)


class ProvidedComputeDomain(Strict):
    """`kimi-k3:cluster.computeDomain.provided`: a ComputeDomain the provider made for the rack (CoreWeave CKS
    creates one per GB200/GB300 rack when it joins the cluster: docs.coreweave.com, IMEX with DRA). The graph
    claims its channel and creates none; `up` reads it from the cluster first (components/serving_graph.py)."""

    name: str = Field(
        pattern=OBJECT_NAME,
        description="the ComputeDomain's metadata.name (kubectl get computedomains -A)",
    )
    namespace: str = Field(
        pattern=DNS_LABEL,
        description="its namespace: the graph must run there (the DRA driver refuses a channel claim from another)",
    )
    channel_template: str = Field(
        alias="channelTemplate",
        pattern=OBJECT_NAME,
        description="its spec.channel.resourceClaimTemplate.name: the template the driver made beside it",
    )
    nodes: int = Field(
        ge=1,
        description="GPU nodes the domain spans (a full NVL72 rack: 18); `up` refuses a domain whose spec.numNodes "
        "is smaller than the graph's nodes",
    )


class ComputeDomainConfig(Strict):
    """`kimi-k3:cluster.computeDomain`: whose ComputeDomain the graph's NVLink roles claim."""

    provided: Optional[ProvidedComputeDomain] = Field(
        None, description="existing mode: the provider's ComputeDomain; unset: the graph creates its own"
    )


def check_provided_compute_domain(cluster: "ClusterConfig", serving_namespace: str, domain_nodes: int) -> None:
    """A provided ComputeDomain only in existing mode, in the graph's namespace, no larger than one NVLink domain."""
    provided = cluster.compute_domain.provided
    if provided is None:
        return
    key = "kimi-k3:cluster.computeDomain.provided"
    if cluster.mode != "existing":
        raise ConfigError(
            f"{key}: a provider's ComputeDomain is adopted only in kimi-k3:cluster.mode existing (mode is "
            f"{cluster.mode!r}, where the graph creates its own); allowed: mode existing, or remove {key}"
        )
    if provided.namespace != serving_namespace:
        # cmd/compute-domain-kubelet-plugin/computedomain.go AssertComputeDomainNamespace (NVIDIA/k8s-dra-driver-gpu)
        raise ConfigError(
            f"{key}.namespace = {provided.namespace!r}: the graph runs in kimi-k3:serving.namespace = "
            f"{serving_namespace!r}, and the DRA driver refuses a channel claim from a namespace other than the "
            f"ComputeDomain's; allowed: {serving_namespace!r}, or set kimi-k3:serving.namespace to "
            f"{provided.namespace!r}"
        )
    if provided.nodes > domain_nodes:
        raise ConfigError(
            f"{key}.nodes = {provided.nodes}: one ComputeDomain is one IMEX domain inside one NVLink domain of at "
            f"most {domain_nodes} nodes on this platform (recipes/facts/platforms.yaml); allowed: 1 to {domain_nodes}"
        )


class ClusterConfig(Strict):
    """`kimi-k3:cluster`: where the Kubernetes objects go."""

    mode: Literal["eks", "gke", "existing", "render"] = Field(
        "render",
        description="`eks`: build VPC, EKS, node groups, storage and add-ons on AWS; `gke`: the same on Google "
        "Cloud (kimi-k3:cluster.gke); "
        "`existing`: a cluster from kubeconfig/context; `render`: write YAML to renderDir, no cluster",
    )
    context: Optional[str] = Field(
        None,
        min_length=1,
        description="kubeconfig context (existing mode); the kubeconfig itself is the secret `kimi-k3:kubeconfig` or $KUBECONFIG",
    )
    render_dir: str = Field(
        "rendered", alias="renderDir", min_length=1, description="directory for manifests in render mode"
    )
    efa_devices_per_node: Optional[int] = Field(
        None,
        alias="efaDevicesPerNode",
        ge=0,
        description="existing/render: EFA devices per GPU node (eks mode: from the instance type)",
    )
    region: str = Field(
        "us-east-1", pattern=allowed_as(r"^[a-z]{2}(-[a-z]+)+-\d$", "an AWS region name, e.g. us-east-1")
    )
    kubernetes_version: str = Field(
        "1.34",
        alias="kubernetesVersion",
        pattern=allowed_as(r"^1\.\d+$", 'a quoted Kubernetes minor version, e.g. "1.34"'),
    )
    vpc_cidr: str = Field(
        "10.64.0.0/16",
        alias="vpcCidr",
        pattern=allowed_as(r"^\d+\.\d+\.\d+\.\d+/16$", "an IPv4 /16 CIDR, e.g. 10.64.0.0/16"),
    )
    availability_zones: list[Zone] = Field(
        ["us-east-1a", "us-east-1b"],
        alias="availabilityZones",
        min_length=2,
        max_length=3,
        description="zones of the control plane and system nodes (EKS needs two)",
    )
    admin_principal_arns: list[PrincipalArn] = Field(
        default_factory=list,
        alias="adminPrincipalArns",
        description="IAM principals given cluster-admin access entries",
    )
    public_access_cidrs: list[str] = Field(
        default_factory=list,
        alias="publicAccessCidrs",
        description="IPv4 CIDRs that may reach the public EKS API endpoint (the private endpoint is always on): "
        "required in eks mode while endpointPublicAccess is true; per user, like the reservation id",
    )
    endpoint_public_access: bool = Field(
        True, alias="endpointPublicAccess", description="false: private API endpoint only (pulumi must run in the VPC)"
    )
    allow_public_endpoint_from_anywhere: bool = Field(
        False,
        alias="allowPublicEndpointFromAnywhere",
        description="accept 0.0.0.0/0 in publicAccessCidrs (the API is then reachable from the whole internet)",
    )
    parked: bool = Field(
        False,
        description="eks: keep only the model cache's filesystem and the network it sits in; "
        "EKS, nodes, NAT, add-ons and the graph are deleted by the next `up` (`make park`), and "
        "come back onto the same weights when this is false again (docs/aws.md, Teardown)",
    )
    compute_domain: ComputeDomainConfig = Field(default_factory=ComputeDomainConfig, alias="computeDomain")
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig, alias="systemNodes")
    gpu_nodes: GpuNodesConfig = Field(default_factory=GpuNodesConfig, alias="gpuNodes")
    gke: GkeConfig = Field(default_factory=GkeConfig, description="gke mode: project, location, network, access")

    @field_validator("kubernetes_version")
    @classmethod
    def _dra_ga(cls, v: str) -> str:
        least = recipe_file("facts/aws.yaml")["min_kubernetes_version"]
        if int(v.split(".")[1]) < int(least.split(".")[1]):
            raise ValueError(f"Kubernetes {v} has no resource.k8s.io/v1 (DRA GA); allowed: {least} or later")
        pinned = recipe_file("facts/aws.yaml")["eks_addon_versions"]
        if v not in pinned:
            raise ValueError(
                f"no pinned EKS add-on versions for Kubernetes {v} (recipes/facts/aws.yaml "
                f"eks_addon_versions); allowed: {', '.join(sorted(pinned))}, or add a row with its sources"
            )
        return v

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v)
        except ValueError as exc:
            raise ValueError(f"not an IPv4 network ({exc}); allowed: a private /16 such as 10.64.0.0/16") from None
        if not any(net.subnet_of(ipaddress.IPv4Network(r)) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")):
            raise ValueError(
                "not a private range (RFC 1918); allowed: a /16 in 10.0.0.0/8, 172.16.0.0/12 or "
                "192.168.0.0/16, e.g. 10.64.0.0/16"
            )
        return v

    @field_validator("availability_zones")
    @classmethod
    def _zones(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(
                "a zone listed twice; allowed: two or three different zones, e.g. [us-east-1a, us-east-1b]"
            )
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        for cidr in v:
            try:
                ipaddress.IPv4Network(cidr)
            except ValueError as exc:
                raise ValueError(
                    f"{cidr!r} is not an IPv4 CIDR ({exc}); allowed: e.g. 203.0.113.0/24, 198.51.100.7/32"
                ) from None
        return v
