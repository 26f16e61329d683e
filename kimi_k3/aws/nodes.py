"""The AWS side of `kimi-k3:cluster.mode: eks`, as pure data: instance facts, the GPU node plan, launch template,
node bootstrap, subnets and model storage. Components in components/aws/ only register what these return.

Every check here runs before the first resource is registered and fails with a ConfigError naming the key, the
value and what is allowed.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig
from kimi_k3.facts.aws import EfaLayout, InstanceFacts, default_instance_type, load_aws_facts
from kimi_k3.names import NODE_ROLE_LABEL

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
GPU_KEY = "kimi-k3:cluster.gpuNodes"


def gpu_instance_type(cfg: StackConfig, platform: str) -> str:
    return cfg.cluster.gpu_nodes.instance_type or default_instance_type(platform)


def efa_devices_per_node(cfg: StackConfig, platform: str) -> int:
    """EFA devices each GPU node offers: from the instance type in eks mode, from config otherwise (0 = none)."""
    if cfg.cluster.mode != "eks":
        return cfg.cluster.efa_devices_per_node or 0
    facts = load_aws_facts().instance_types.get(gpu_instance_type(cfg, platform))
    return facts.efa.devices if facts else 0


@dataclass(frozen=True)
class GpuNodePlan:
    """The GPU node group, checked against the recipe, the UltraServer and the reservation."""

    instance: InstanceFacts
    ami_type: str
    capacity_type: str
    reservation_id: Optional[str]
    availability_zone: str
    nodes: int  # what the recipe needs
    max_nodes: int  # what the reservation holds
    ultra_server_nodes: Optional[int]
    desired_nodes: int  # the node group's desired size: `nodes` (or more), or 0 while it must be empty
    desired_explicit: bool = False  # desiredNodes set in config: Pulumi writes it; else only at creation
    rollout_launch_template: bool = False  # a launch template change reaches the node group (at desired size 0)
    imds_hop_limit: int = 1
    efa: bool = False  # attach the instance type's EFA-only interfaces: only when KV moves over EFA

    @property
    def capacity_block(self) -> bool:
        return self.capacity_type == "CAPACITY_BLOCK"


def gpu_node_plan(cfg: StackConfig, platform: str, nodes: int, efa: bool = False) -> GpuNodePlan:
    """Validate `kimi-k3:cluster.gpuNodes` for a recipe that needs `nodes` GPU nodes of `platform`. `efa`: the graph
    moves KV over EFA, so the nodes get their EFA-only interfaces (none otherwise)."""
    facts = load_aws_facts()
    g = cfg.cluster.gpu_nodes
    itype = gpu_instance_type(cfg, platform)
    if g.ami_type not in facts.ami_types:
        raise ConfigError(
            f"{GPU_KEY}.amiType = {g.ami_type!r}: unknown AMI type; allowed: "
            f"{', '.join(sorted(k for k in facts.ami_types if 'NVIDIA' in k))}"
        )
    inst = facts.instance_types.get(itype)
    if inst is None:
        raise ConfigError(
            f"{GPU_KEY}.instanceType = {itype!r}: no facts for this instance type in recipes/facts/aws.yaml; "
            f"allowed: {', '.join(sorted(facts.instance_types))}"
        )
    ami_arch = facts.ami_types[g.ami_type]
    if inst.arch != ami_arch:
        fitting = sorted(n for n, f in facts.instance_types.items() if f.arch == ami_arch)
        raise ConfigError(
            f"{GPU_KEY}.instanceType = {itype!r}: an {inst.arch} instance, but amiType {g.ami_type} is "
            f"{ami_arch}; allowed with this AMI: {', '.join(fitting)}"
        )
    if inst.platform != platform:
        fitting = sorted(n for n, f in facts.instance_types.items() if f.platform == platform)
        raise ConfigError(
            f"{GPU_KEY}.instanceType = {itype!r}: has {inst.platform} GPUs but recipe {cfg.recipe} runs on "
            f"{platform}; allowed: {', '.join(fitting)}"
        )
    capacity = g.capacity_type or ("CAPACITY_BLOCK" if inst.capacity_block_only else "ON_DEMAND")
    if inst.capacity_block_only and capacity != "CAPACITY_BLOCK":
        raise ConfigError(
            f"{GPU_KEY}.capacityType = {capacity!r}: {itype} is sold only as EC2 Capacity Blocks; "
            "allowed: CAPACITY_BLOCK"
        )
    if capacity == "CAPACITY_BLOCK" and not g.capacity_reservation_id:
        raise ConfigError(
            f"{GPU_KEY}.capacityReservationId: required for capacityType CAPACITY_BLOCK ({itype}); "
            "allowed: the Capacity Block's reservation id, e.g. cr-0123456789abcdef0 "
            "(aws ec2 describe-capacity-reservations)"
        )
    ultra = None
    if inst.ultraserver_nodes:
        ultra = g.ultra_server_nodes
        if ultra not in inst.ultraserver_nodes:
            raise ConfigError(
                f"{GPU_KEY}.ultraServerNodes = {ultra}: {itype} UltraServers hold "
                f"{' or '.join(map(str, inst.ultraserver_nodes))} instances"
            )
        if nodes > ultra:
            bigger = [n for n in inst.ultraserver_nodes if n >= nodes]
            allowed = (
                f"{bigger[0]}"
                if bigger
                else f"none: at most {max(inst.ultraserver_nodes)} nodes share one NVLink domain"
            )
            raise ConfigError(
                f"{GPU_KEY}.ultraServerNodes = {ultra}: recipe {cfg.recipe} needs {nodes} GPU nodes, more than "
                f"one UltraServer holds; allowed: {allowed} (or fewer replicas in kimi-k3:serving)"
            )
    reservation = g.reservation_nodes or (ultra if capacity == "CAPACITY_BLOCK" and ultra else nodes)
    if nodes > reservation:
        raise ConfigError(
            f"{GPU_KEY}.reservationNodes = {reservation}: recipe {cfg.recipe} needs {nodes} GPU nodes, more "
            f"than the reservation holds; allowed: >= {nodes} (buy a larger Capacity Block or reduce replicas)"
        )
    desired = nodes if g.desired_nodes is None else g.desired_nodes
    if desired and not nodes <= desired <= reservation:
        raise ConfigError(
            f"{GPU_KEY}.desiredNodes = {desired}: recipe {cfg.recipe} needs {nodes} GPU nodes and the "
            f"reservation holds {reservation}; allowed: 0 (scale to zero) or {nodes}..{reservation}"
        )
    if g.rollout_launch_template and desired != 0:
        raise ConfigError(
            f"{GPU_KEY}.rolloutLaunchTemplate = true: EKS upgrades a Capacity Block node group only at "
            f"desired size 0 (capacity-blocks-mng), and the provider applies the template before the "
            f"size; allowed: with desiredNodes: 0, after an `up` that set desiredNodes: 0 alone "
            f"(docs/aws.md, Capacity Block lifecycle)"
        )
    return GpuNodePlan(
        instance=inst,
        ami_type=g.ami_type,
        capacity_type=capacity,
        reservation_id=g.capacity_reservation_id,
        availability_zone=g.availability_zone,
        nodes=nodes,
        max_nodes=reservation,
        ultra_server_nodes=ultra,
        desired_nodes=desired,
        desired_explicit=g.desired_nodes is not None,
        rollout_launch_template=g.rollout_launch_template,
        imds_hop_limit=g.imds_hop_limit,
        efa=efa,
    )


def gpu_node_group_ignore_changes(plan: GpuNodePlan) -> list[str]:
    """Node group inputs Pulumi must not write back after creation.

    - scalingConfig.desiredSize: EKS scales a Capacity Block node group to 0 40 minutes before the block ends (a
      scheduled action, "Amazon EKS Node Group Capacity Scaledown Before Reservation End"; capacity-blocks-mng);
      a later `up` must not scale it back. Written only when `desiredNodes` is set explicitly.
    - launchTemplate.version: EKS upgrades a Capacity Block node group only at desired size 0, and the AWS provider
      applies a version change before a scaling change (resourceNodeGroupUpdate: "Do any version update first"),
      so a changed template waits as a new version until `rolloutLaunchTemplate` (with desiredNodes 0)."""
    out = []
    if not plan.desired_explicit:
        out.append("scalingConfig.desiredSize")
    if not plan.rollout_launch_template:
        out.append("launchTemplate.version")
    return out


# The VPC CNI enforces NetworkPolicy only with its network policy agent on: add-on configuration
# `enableNetworkPolicy: "true"` (EKS user guide cni-network-policy-configure; vpc-cni >= 1.14, the controller runs in
# the EKS control plane). Pods no policy selects keep all traffic; the weights-prefetch peers' policy needs it.
VPC_CNI_CONFIGURATION = '{"enableNetworkPolicy":"true"}'


# --- node bootstrap ------------------------------------------------------------------------------------------------

USER_DATA_BOUNDARY = "KIMIK3BOUNDARY"


def gpu_node_user_data() -> str:
    """AL2023 user data (MIME multipart, merged by EKS with its own NodeConfig for a managed node group).

    - NodeConfig: RAID0 over the instance-store NVMe drives for containerd and kubelet (EKS UltraServer guide).
    - Script: disable the host nvidia-imex service, which otherwise holds the driver's IMEX session so the DRA
      driver's ComputeDomain daemon never gets ready (REFERENCE.md; NVIDIA aicr recipes). cloud-init runs scripts
      before nodeadm starts kubelet, so no pod can land before the service is gone.
    """
    b = USER_DATA_BOUNDARY
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{b}"\n'
        "\n"
        f"--{b}\n"
        "Content-Type: application/node.eks.aws\n"
        "\n"
        "---\n"
        "apiVersion: node.eks.aws/v1alpha1\n"
        "kind: NodeConfig\n"
        "spec:\n"
        "  instance:\n"
        "    localStorage:\n"
        "      strategy: RAID0\n"
        "\n"
        f"--{b}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n'
        "\n"
        "#!/bin/bash\n"
        "set -euo pipefail\n"
        "# ComputeDomains run their own IMEX daemon (NVIDIA DRA driver); the host service must not hold the session.\n"
        "systemctl disable --now nvidia-imex.service || true\n"
        "systemctl mask nvidia-imex.service\n"
        "\n"
        f"--{b}--\n"
    )


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def network_interfaces(layout: EfaLayout, security_group_ids: list[Any], efa: bool = True) -> list[dict[str, Any]]:
    """Launch template interfaces: ENA primary on card 0, and with `efa` one EFA-only interface (device 0) on each EFA
    card. Without EFA traffic (KV over NVLink, TP inside one NVLink domain) the EFA interfaces carry nothing, and an
    interface on a network card the instance lacks fails the launch (p6e-gb300's EFA layout is undocumented)."""
    primary = {
        "network_card_index": layout.primary_card,
        "device_index": 0,
        "interface_type": "interface",
        "security_groups": security_group_ids,
        "delete_on_termination": "true",
    }
    if not efa:
        return [primary]
    efa = [
        {
            "network_card_index": card,
            "device_index": 0,
            "interface_type": "efa-only",
            "security_groups": security_group_ids,
            "delete_on_termination": "true",
        }
        for card in layout.efa_only_cards
    ]
    return [primary] + efa


def gpu_launch_template(
    plan: GpuNodePlan, security_group_ids: list[Any], root_volume_gib: int, tags: dict[str, str]
) -> dict[str, Any]:
    """kwargs of aws.ec2.LaunchTemplate for the GPU node group. No placement group: Capacity Blocks place
    UltraServer instances themselves, and EKS rejects a placement group with capacity-block market type."""
    lt: dict[str, Any] = {
        "instance_type": plan.instance.name,
        "user_data": b64(gpu_node_user_data()),
        "network_interfaces": network_interfaces(plan.instance.efa, security_group_ids, plan.efa),
        "block_device_mappings": [
            {
                "device_name": "/dev/xvda",
                "ebs": {
                    "volume_size": root_volume_gib,
                    "volume_type": "gp3",
                    "delete_on_termination": "true",
                    "encrypted": "true",
                },
            }
        ],
        # IMDSv2 only; hop limit 1 (default): a pod in its own network namespace is one hop further and cannot take
        # the node role's credentials (EKS best practices, "Restrict access to the instance profile").
        "metadata_options": {
            "http_endpoint": "enabled",
            "http_tokens": "required",
            "http_put_response_hop_limit": plan.imds_hop_limit,
        },
        "tag_specifications": [{"resource_type": "instance", "tags": tags}],
        "update_default_version": True,
    }
    if plan.reservation_id:
        lt["capacity_reservation_specification"] = {
            "capacity_reservation_target": {"capacity_reservation_id": plan.reservation_id}
        }
    if plan.capacity_block:
        lt["instance_market_options"] = {"market_type": "capacity-block"}
    return lt


def gpu_node_labels(platform: str) -> dict[str, str]:
    return {NODE_ROLE_LABEL: "gpu", "kimi-k3.io/platform": platform}


SYSTEM_LABELS = {NODE_ROLE_LABEL: "system"}


# --- access ---------------------------------------------------------------------------------------------------------


# --- network -------------------------------------------------------------------------------------------------------


# --- storage -------------------------------------------------------------------------------------------------------


COMPILE_CACHE_ROOT = "/compile-cache"  # the compile cache's directory in its EFS file system (the access point's root)


def compile_cache_access_point(file_system_id: Any, uid: int, gid: int) -> dict[str, Any]:
    """kwargs of aws.efs.AccessPoint for the compile cache. A new EFS root is root:root 0755 (EFS user guide, "Working
    with users, groups, and permissions at the NFS level"); the EFS CSI driver declares no fsGroupPolicy
    (charts/aws-efs-csi-driver/templates/csidriver.yaml), so fsGroup chowns nothing; kubelet makes a missing subPath as
    itself with the volume root's mode (pkg/kubelet/kubelet_pods.go makeMounts). Through an access point every NFS
    request runs as its PosixUser and EFS creates its root directory with CreationInfo (EFS API CreationInfo): the
    workers' uid/gid own everything, kubelet's subPath directories included. Chosen over the driver's dynamic
    provisioning (StorageClass uid/gid/directoryPerms): that needs EFS API rights on the controller (it has none) and
    makes an access point per claim that Pulumi does not track; here the access point is a stack resource."""
    return {
        "file_system_id": file_system_id,
        "posix_user": {"uid": uid, "gid": gid},
        "root_directory": {
            "path": COMPILE_CACHE_ROOT,
            "creation_info": {"owner_uid": uid, "owner_gid": gid, "permissions": "0775"},
        },
    }


def efs_access_point_handle(file_system_id: str, access_point_id: str) -> str:
    """The EFS CSI driver's volumeHandle for an access point, `[FileSystemId]::[AccessPointId]` (empty subpath;
    aws-efs-csi-driver examples/kubernetes/access_points; the driver adds the `tls` the access point needs)."""
    return f"{file_system_id}::{access_point_id}"


# --- weights in S3: fetchers, Mountpoint, the Local Zone -------------------------------------------------------------
