"""The AWS side of `kimi-k3:cluster.mode: eks`, as pure data: instance facts, the GPU node plan, launch template,
node bootstrap, subnets and model storage. Components in components/aws/ only register what these return.

Every check here runs before the first resource is registered and fails with a ConfigError naming the key, the
value and what is allowed.
"""
from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from functools import lru_cache
from typing import Any, Optional


from .data import recipe_file
from .config import ClusterConfig, ConfigError, StackConfig

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
NODE_ROLE_LABEL = "kimi-k3.io/node-role"
GPU_KEY = "kimi-k3:cluster.gpuNodes"


@dataclass(frozen=True)
class EfaLayout:
    primary_card: int
    efa_only_cards: tuple[int, ...]

    @property
    def devices(self) -> int:
        return len(self.efa_only_cards)


@dataclass(frozen=True)
class InstanceFacts:
    name: str
    platform: str
    arch: str
    capacity_block_only: bool
    ultraserver_nodes: tuple[int, ...]
    efa: EfaLayout


@dataclass(frozen=True)
class AwsFacts:
    ami_types: dict[str, str]
    instance_types: dict[str, InstanceFacts]
    fsx_size_step_gib: int


@lru_cache(maxsize=None)
def load_aws_facts() -> AwsFacts:
    raw = recipe_file("aws.yaml")
    types = {
        name: InstanceFacts(name=name, platform=t["platform"], arch=t["arch"],
                            capacity_block_only=t["capacity_block_only"],
                            ultraserver_nodes=tuple(t["ultraserver_nodes"]),
                            efa=EfaLayout(t["efa"]["primary_card"], tuple(t["efa"]["efa_only_cards"])))
        for name, t in raw["instance_types"].items()
    }
    fsx = raw["fsx_persistent_2"]
    return AwsFacts(ami_types=dict(raw["ami_types"]),
                    instance_types=types, fsx_size_step_gib=fsx["size_step_gib"])


def default_instance_type(platform: str) -> str:
    return f"p6e-{platform}.36xlarge"


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
    nodes: int                  # what the recipe needs
    max_nodes: int              # what the reservation holds
    ultra_server_nodes: Optional[int]
    desired_nodes: int          # the node group's desired size: `nodes` (or more), or 0 while it must be empty
    desired_explicit: bool = False   # desiredNodes set in config: Pulumi writes it; else only at creation
    rollout_launch_template: bool = False  # a launch template change reaches the node group (at desired size 0)
    imds_hop_limit: int = 1
    efa: bool = False           # attach the instance type's EFA-only interfaces: only when KV moves over EFA

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
        raise ConfigError(f"{GPU_KEY}.amiType = {g.ami_type!r}: unknown AMI type; allowed: "
                          f"{', '.join(sorted(k for k in facts.ami_types if 'NVIDIA' in k))}")
    inst = facts.instance_types.get(itype)
    if inst is None:
        raise ConfigError(f"{GPU_KEY}.instanceType = {itype!r}: no facts for this instance type in recipes/aws.yaml; "
                          f"allowed: {', '.join(sorted(facts.instance_types))}")
    ami_arch = facts.ami_types[g.ami_type]
    if inst.arch != ami_arch:
        fitting = sorted(n for n, f in facts.instance_types.items() if f.arch == ami_arch)
        raise ConfigError(f"{GPU_KEY}.instanceType = {itype!r}: an {inst.arch} instance, but amiType {g.ami_type} is "
                          f"{ami_arch}; allowed with this AMI: {', '.join(fitting)}")
    if inst.platform != platform:
        fitting = sorted(n for n, f in facts.instance_types.items() if f.platform == platform)
        raise ConfigError(f"{GPU_KEY}.instanceType = {itype!r}: has {inst.platform} GPUs but recipe {cfg.recipe} runs on "
                          f"{platform}; allowed: {', '.join(fitting)}")
    capacity = g.capacity_type or ("CAPACITY_BLOCK" if inst.capacity_block_only else "ON_DEMAND")
    if inst.capacity_block_only and capacity != "CAPACITY_BLOCK":
        raise ConfigError(f"{GPU_KEY}.capacityType = {capacity!r}: {itype} is sold only as EC2 Capacity Blocks; "
                          "allowed: CAPACITY_BLOCK")
    if capacity == "CAPACITY_BLOCK" and not g.capacity_reservation_id:
        raise ConfigError(f"{GPU_KEY}.capacityReservationId: required for capacityType CAPACITY_BLOCK ({itype}); "
                          "allowed: the Capacity Block's reservation id, e.g. cr-0123456789abcdef0 "
                          "(aws ec2 describe-capacity-reservations)")
    ultra = None
    if inst.ultraserver_nodes:
        ultra = g.ultra_server_nodes
        if ultra not in inst.ultraserver_nodes:
            raise ConfigError(f"{GPU_KEY}.ultraServerNodes = {ultra}: {itype} UltraServers hold "
                              f"{' or '.join(map(str, inst.ultraserver_nodes))} instances")
        if nodes > ultra:
            bigger = [n for n in inst.ultraserver_nodes if n >= nodes]
            allowed = f"{bigger[0]}" if bigger else f"none: at most {max(inst.ultraserver_nodes)} nodes share one NVLink domain"
            raise ConfigError(f"{GPU_KEY}.ultraServerNodes = {ultra}: recipe {cfg.recipe} needs {nodes} GPU nodes, more than "
                              f"one UltraServer holds; allowed: {allowed} (or fewer replicas in kimi-k3:serving)")
    reservation = g.reservation_nodes or (ultra if capacity == "CAPACITY_BLOCK" and ultra else nodes)
    if nodes > reservation:
        raise ConfigError(f"{GPU_KEY}.reservationNodes = {reservation}: recipe {cfg.recipe} needs {nodes} GPU nodes, more "
                          f"than the reservation holds; allowed: >= {nodes} (buy a larger Capacity Block or reduce replicas)")
    desired = nodes if g.desired_nodes is None else g.desired_nodes
    if desired and not nodes <= desired <= reservation:
        raise ConfigError(f"{GPU_KEY}.desiredNodes = {desired}: recipe {cfg.recipe} needs {nodes} GPU nodes and the "
                          f"reservation holds {reservation}; allowed: 0 (scale to zero) or {nodes}..{reservation}")
    if g.rollout_launch_template and desired != 0:
        raise ConfigError(f"{GPU_KEY}.rolloutLaunchTemplate = true: EKS upgrades a Capacity Block node group only at "
                          f"desired size 0 (capacity-blocks-mng), and the provider applies the template before the "
                          f"size; allowed: with desiredNodes: 0, after an `up` that set desiredNodes: 0 alone "
                          f"(docs/aws.md, Capacity Block lifecycle)")
    return GpuNodePlan(instance=inst, ami_type=g.ami_type, capacity_type=capacity,
                       reservation_id=g.capacity_reservation_id, availability_zone=g.availability_zone,
                       nodes=nodes, max_nodes=reservation, ultra_server_nodes=ultra, desired_nodes=desired,
                       desired_explicit=g.desired_nodes is not None, rollout_launch_template=g.rollout_launch_template,
                       imds_hop_limit=g.imds_hop_limit, efa=efa)


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


def addon_version(kubernetes_version: str, addon: str) -> str | None:
    """The pinned version of an EKS add-on for this Kubernetes minor (recipes/aws.yaml), or None: EKS's default."""
    return recipe_file("aws.yaml")["eks_addon_versions"][kubernetes_version].get(addon)


def addon_version_problems(resources: list[dict[str, Any]]) -> list[str]:
    """The cluster's kube-proxy and CoreDNS add-ons unpinned, or kube-proxy built for another minor than the cluster
    (EKS builds kube-proxy per minor: vX.Y.Z-eksbuild.N for Kubernetes X.Y)."""
    clusters = [r for r in resources if r["type"] == "aws:eks/cluster:Cluster"]
    if not clusters:
        return []
    minor = str((clusters[0].get("inputs") or {}).get("version"))
    out = []
    for r in resources:
        i = r.get("inputs") or {}
        if r["type"] != "aws:eks/addon:Addon" or i.get("addonName") not in ("kube-proxy", "coredns"):
            continue
        v = i.get("addonVersion")
        if not v:
            out.append(f"{r['name']}: {i['addonName']} is not pinned (recipes/aws.yaml eks_addon_versions)")
        elif i["addonName"] == "kube-proxy" and not str(v).startswith(f"v{minor}."):
            out.append(f"{r['name']}: kube-proxy {v} is not built for Kubernetes {minor}")
    return out


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
    primary = {"network_card_index": layout.primary_card, "device_index": 0, "interface_type": "interface",
               "security_groups": security_group_ids, "delete_on_termination": "true"}
    if not efa:
        return [primary]
    efa = [{"network_card_index": card, "device_index": 0, "interface_type": "efa-only",
            "security_groups": security_group_ids, "delete_on_termination": "true"} for card in layout.efa_only_cards]
    return [primary] + efa


def gpu_launch_template(plan: GpuNodePlan, security_group_ids: list[Any], root_volume_gib: int,
                        tags: dict[str, str]) -> dict[str, Any]:
    """kwargs of aws.ec2.LaunchTemplate for the GPU node group. No placement group: Capacity Blocks place
    UltraServer instances themselves, and EKS rejects a placement group with capacity-block market type."""
    lt: dict[str, Any] = {
        "instance_type": plan.instance.name,
        "user_data": b64(gpu_node_user_data()),
        "network_interfaces": network_interfaces(plan.instance.efa, security_group_ids, plan.efa),
        "block_device_mappings": [{"device_name": "/dev/xvda", "ebs": {
            "volume_size": root_volume_gib, "volume_type": "gp3", "delete_on_termination": "true", "encrypted": "true"}}],
        # IMDSv2 only; hop limit 1 (default): a pod in its own network namespace is one hop further and cannot take
        # the node role's credentials (EKS best practices, "Restrict access to the instance profile").
        "metadata_options": {"http_endpoint": "enabled", "http_tokens": "required",
                             "http_put_response_hop_limit": plan.imds_hop_limit},
        "tag_specifications": [{"resource_type": "instance", "tags": tags}],
        "update_default_version": True,
    }
    if plan.reservation_id:
        lt["capacity_reservation_specification"] = {
            "capacity_reservation_target": {"capacity_reservation_id": plan.reservation_id}}
    if plan.capacity_block:
        lt["instance_market_options"] = {"market_type": "capacity-block"}
    return lt


def gpu_node_labels(platform: str) -> dict[str, str]:
    return {NODE_ROLE_LABEL: "gpu", "kimi-k3.io/platform": platform}


SYSTEM_LABELS = {NODE_ROLE_LABEL: "system"}


# --- access ---------------------------------------------------------------------------------------------------------

def endpoint_access(c: ClusterConfig) -> dict[str, Any]:
    """The EKS API endpoint's vpc_config part. Private always; public only for the CIDRs the user names, never the
    whole internet unless `allowPublicEndpointFromAnywhere` says so."""
    key = "kimi-k3:cluster"
    if not c.endpoint_public_access:
        if c.public_access_cidrs:
            raise ConfigError(f"{key}.publicAccessCidrs = {c.public_access_cidrs}: the public endpoint is off "
                              f"(endpointPublicAccess: false); allowed: none")
        return {"endpoint_private_access": True, "endpoint_public_access": False}
    if not c.public_access_cidrs:
        raise ConfigError(f"{key}.publicAccessCidrs: required while the public API endpoint is on; allowed: the "
                          "IPv4 CIDRs where pulumi and kubectl run, e.g. 203.0.113.0/24 (pulumi config set --path "
                          "'kimi-k3:cluster.publicAccessCidrs[0]' ...), or endpointPublicAccess: false (run pulumi "
                          "inside the VPC)")
    anywhere = [cidr for cidr in c.public_access_cidrs if ipaddress.IPv4Network(cidr).prefixlen == 0]
    if anywhere and not c.allow_public_endpoint_from_anywhere:
        raise ConfigError(f"{key}.publicAccessCidrs = {c.public_access_cidrs}: {anywhere[0]} opens the EKS API "
                          "endpoint to the whole internet; allowed: narrower CIDRs, or "
                          f"{key}.allowPublicEndpointFromAnywhere: true to accept that")
    return {"endpoint_private_access": True, "endpoint_public_access": True,
            "public_access_cidrs": list(c.public_access_cidrs)}


def irsa_trust_policy(provider_arn: str, issuer_url: str, namespace: str, service_account: str) -> str:
    """Trust policy of an IAM role for one Kubernetes service account (IRSA: EKS iam-roles-for-service-accounts)."""
    import json
    host = issuer_url.removeprefix("https://")
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": provider_arn}, "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                                       f"{host}:aud": "sts.amazonaws.com"}}}]}, sort_keys=True)


def least_privilege_problems(resources: list[dict[str, Any]]) -> list[str]:
    """What in a rendered stack (resources.json entries) hands out more AWS access than the pods need: GPU launch
    templates whose IMDS hop limit lets pods reach the node role, the VPC CNI policy on a node role, an API endpoint
    open to the whole internet, a CSI driver add-on without its own role. Empty: nothing."""
    out = []
    roles = [r for r in resources if r["type"] == "aws:iam/role:Role"]
    for r in resources:
        t, i, n = r["type"], r.get("inputs") or {}, r["name"]
        if t == "aws:ec2/launchTemplate:LaunchTemplate":
            hops = (i.get("metadataOptions") or {}).get("httpPutResponseHopLimit", 1)
            if hops > 1:
                out.append(f"{n}: IMDS hop limit {hops}: pods can take the node role's credentials")
        if t == "aws:iam/rolePolicyAttachment:RolePolicyAttachment" and i.get("policyArn", "").endswith(
                "/AmazonEKS_CNI_Policy"):
            # The attachment names its role by physical name: the role's own, or its autoname (resource name + suffix).
            named = [x for x in roles if str(i.get("role")) in (x["inputs"].get("name"), None)
                     or str(i.get("role")).startswith(x["name"])]
            role = max(named, key=lambda x: len(x["name"]), default=None)
            if role is not None and "ec2.amazonaws.com" in str(role["inputs"].get("assumeRolePolicy")):
                out.append(f"{n}: the VPC CNI policy is on a node role (every pod on the node can use it)")
        if t == "aws:eks/cluster:Cluster":
            vpc = i.get("vpcConfig") or {}
            if vpc.get("endpointPublicAccess", True) and any(
                    ipaddress.IPv4Network(c).prefixlen == 0 for c in vpc.get("publicAccessCidrs") or ["0.0.0.0/0"]):
                out.append(f"{n}: the public API endpoint accepts the whole internet")
        if t == "aws:eks/addon:Addon" and i.get("addonName") in ("vpc-cni", "aws-fsx-csi-driver", "aws-efs-csi-driver",
                                                                 MOUNTPOINT_ADDON) \
                and not i.get("serviceAccountRoleArn"):
            out.append(f"{n}: {i.get('addonName')} has no role of its own (falls back to the node role)")
    out += cni_ordering_problems(resources)
    out += addon_version_problems(resources)
    return out


def cni_ordering_problems(resources: list[dict[str, Any]]) -> list[str]:
    """A node group that may join before the vpc-cni add-on while EKS bootstraps its self-managed vpc-cni: that
    aws-node pod runs on the node role (no CNI policy here), and pods created before the add-on sets the IRSA role
    on the aws-node service account keep it ("Configure Amazon VPC CNI plugin to use IRSA": re-create them), so the
    node never gets pod IPs. Safe: the group waits for the add-on, or the cluster bootstraps no self-managed
    add-ons (then vpc-cni, kube-proxy and CoreDNS must be add-ons)."""
    clusters = [r for r in resources if r["type"] == "aws:eks/cluster:Cluster"]
    addons = {(r.get("inputs") or {}).get("addonName"): r for r in resources if r["type"] == "aws:eks/addon:Addon"}
    if not clusters:
        return []
    bootstrapped = (clusters[0].get("inputs") or {}).get("bootstrapSelfManagedAddons", True) is not False
    out = []
    if not bootstrapped:
        out += [f"{clusters[0]['name']}: bootstrapSelfManagedAddons is false but no {a} add-on is installed"
                for a in ("vpc-cni", "kube-proxy", "coredns") if a not in addons]
    cni = addons.get("vpc-cni")
    for r in resources:
        if r["type"] == "aws:eks/nodeGroup:NodeGroup" and bootstrapped and (
                cni is None or cni["urn"] not in r.get("dependsOn", [])):
            out.append(f"{r['name']}: its nodes can join before the vpc-cni add-on gives aws-node its own role, and "
                       "EKS's self-managed aws-node would keep the node role (no CNI policy): no pod IPs")
    return out


# --- network -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SubnetPlan:
    name: str
    zone: str
    cidr: str
    public: bool
    role: str        # "system" | "gpu" | "public"


def subnet_plan(cfg: StackConfig) -> list[SubnetPlan]:
    """/19 private subnets per control-plane zone and one for the GPU zone (unless it is one of them); /24 public
    subnets for the NAT gateway. Nodes live only in private subnets."""
    c = cfg.cluster
    net = ipaddress.ip_network(c.vpc_cidr)
    blocks = list(net.subnets(new_prefix=19))
    public = list(blocks[-1].subnets(new_prefix=24))
    out = [SubnetPlan(f"private-{z}", z, str(blocks[i]), False, "system") for i, z in enumerate(c.availability_zones)]
    gz = c.gpu_nodes.availability_zone
    if gz not in c.availability_zones:
        out.append(SubnetPlan(f"private-{gz}", gz, str(blocks[4]), False, "gpu"))
    out += [SubnetPlan(f"public-{z}", z, str(public[i]), True, "public") for i, z in enumerate(c.availability_zones)]
    return out


# --- storage -------------------------------------------------------------------------------------------------------

def static_pv(name: str, capacity_gi: int, driver: str, volume_handle: Any, attributes: dict[str, Any],
              claim_namespace: str, claim_name: str, mount_options: Optional[list[str]] = None) -> dict[str, Any]:
    """A PersistentVolume pre-bound (claimRef) to the model-cache PVC, reclaim policy Retain.

    Why a static PV and not a StorageClass: the filesystem is a Pulumi resource, protected and retained, so the
    claim must bind to exactly that filesystem. Dynamic provisioning would create a second, untracked filesystem
    whose lifetime follows the PVC, not the stack."""
    spec: dict[str, Any] = {
        "capacity": {"storage": f"{capacity_gi}Gi"},
        "accessModes": ["ReadWriteMany"],
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": "",
        "volumeMode": "Filesystem",
        "claimRef": {"namespace": claim_namespace, "name": claim_name},
        "csi": {"driver": driver, "volumeHandle": volume_handle, "volumeAttributes": attributes},
    }
    if mount_options:
        spec["mountOptions"] = mount_options
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "kimi-k3"}}, "spec": spec}


COMPILE_CACHE_ROOT = "/compile-cache"   # the compile cache's directory in its EFS file system (the access point's root)


def compile_cache_access_point(file_system_id: Any, uid: int, gid: int) -> dict[str, Any]:
    """kwargs of aws.efs.AccessPoint for the compile cache. A new EFS root is root:root 0755 (EFS user guide, "Working
    with users, groups, and permissions at the NFS level"); the EFS CSI driver declares no fsGroupPolicy
    (charts/aws-efs-csi-driver/templates/csidriver.yaml), so fsGroup chowns nothing; kubelet makes a missing subPath as
    itself with the volume root's mode (pkg/kubelet/kubelet_pods.go makeMounts). Through an access point every NFS
    request runs as its PosixUser and EFS creates its root directory with CreationInfo (EFS API CreationInfo): the
    workers' uid/gid own everything, kubelet's subPath directories included. Chosen over the driver's dynamic
    provisioning (StorageClass uid/gid/directoryPerms): that needs EFS API rights on the controller (it has none) and
    makes an access point per claim that Pulumi does not track; here the access point is a stack resource."""
    return {"file_system_id": file_system_id, "posix_user": {"uid": uid, "gid": gid},
            "root_directory": {"path": COMPILE_CACHE_ROOT, "creation_info": {
                "owner_uid": uid, "owner_gid": gid, "permissions": "0775"}}}


def efs_access_point_handle(file_system_id: str, access_point_id: str) -> str:
    """The EFS CSI driver's volumeHandle for an access point, `[FileSystemId]::[AccessPointId]` (empty subpath;
    aws-efs-csi-driver examples/kubernetes/access_points; the driver adds the `tls` the access point needs)."""
    return f"{file_system_id}::{access_point_id}"


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (the AWS CLI on the machine running pulumi)."""
    import json
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster_name,
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "users": [{"name": cluster_name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region],
            "interactiveMode": "Never"}}}],
    }, sort_keys=True)


def pv_size_gi(cfg: StackConfig, cache_gi: int) -> int:
    """What the static PV advertises: the FSx capacity (GiB), or the cache size for EFS (elastic)."""
    return cfg.storage.fsx.storage_capacity_gib if cfg.storage.resolved_kind == "fsx-lustre" else cache_gi


def check_storage(cfg: StackConfig, cache_gi: int) -> None:
    if cfg.storage.resolved_kind == "fsx-lustre" and cache_gi > cfg.storage.fsx.storage_capacity_gib:
        cap, step = cfg.storage.fsx.storage_capacity_gib, load_aws_facts().fsx_size_step_gib
        need = -(-cache_gi // step) * step
        raise ConfigError(f"kimi-k3:storage.fsx.storageCapacityGiB = {cap}: the model cache needs {cache_gi} GiB; "
                          f"allowed: {need} or more (a multiple of {step})")


# --- weights in S3: fetchers, Mountpoint, the Local Zone -------------------------------------------------------------

FETCH_SCRIPT = Path(__file__).with_name("fetch_checkpoint.py")
# Amazon Linux 2023 for the fetchers, resolved by EC2 at launch ("resolve:ssm:" image ids, EC2 user guide
# "Use a Systems Manager parameter instead of an AMI ID"); the public parameter AWS publishes per architecture.
FETCHER_AMI = "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
MOUNTPOINT_ADDON = "aws-mountpoint-s3-csi-driver"       # EKS add-on name (EKS user guide, mountpoint-for-s3-add-on)
MOUNTPOINT_DRIVER = "s3.csi.aws.com"
MOUNTPOINT_SERVICE_ACCOUNT = "s3-csi-driver-sa"   # the add-on's node service account in kube-system (same guide)


def is_local_zone(zone: str, region: str) -> bool:
    """A Local Zone's name extends its parent Region's with a location (us-east-1-dfw-2a); an AZ's adds a letter."""
    return zone.startswith(region + "-")


def storage_zone(cfg: StackConfig) -> str:
    """Where a filesystem of the stack (FSx, EFS mount target) is created: the GPU zone, unless it is a Local Zone.
    No source shows FSx for Lustre or EFS in the Dallas Local Zone (docs/aws.md "Model storage"): the EKS Local
    Zones guide lists node groups, EBS volumes and ALBs only. Then the first control-plane zone, across the link."""
    c = cfg.cluster
    gz = c.gpu_nodes.availability_zone
    return c.availability_zones[0] if is_local_zone(gz, c.region) else gz


def fetcher_user_data(*, bucket: str, prefix: str, repo: str, revision: str, secret_arn: str, region: str,
                      index: int, count: int, hub_version: str, deadline_seconds: int = 28800) -> str:
    """Cloud-init script of one fetcher: Python 3.12 + huggingface_hub, the token from Secrets Manager (never in user
    data), the fetch script, then power off (the instance terminates: shutdown behaviour `terminate`). An EXIT trap
    powers off on every path, and on failure first writes the failing step and the log's tail to the bucket
    (fetch_checkpoint.failure_key), which the verify Job reports at once instead of polling for hours. Every step
    ends by `deadline_seconds` from boot (the stack's download timeout): a hung step has no exit path otherwise."""
    from .fetch_checkpoint import failure_key
    script = base64.b64encode(FETCH_SCRIPT.read_bytes()).decode()
    failed = f"s3://{bucket}/{failure_key(prefix, index, count)}"
    log = "/var/log/kimi-k3-fetch.log"
    return "\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        f"export AWS_DEFAULT_REGION={region}",
        # Every exit (a failed step under set -e, a signal, success) runs this; it cannot itself stop the power-off.
        "step=boot",
        f"deadline=$((SECONDS + {deadline_seconds}))",
        # A hung step (stalled transfer, unanswering mirror) is cut at the deadline: exit 124, then the trap.
        "bounded() { local left=$((deadline - SECONDS)); timeout --kill-after=30 $((left > 1 ? left : 1)) \"$@\"; }",
        "finish() {",
        "  rc=$?",
        "  trap - EXIT",
        "  set +e",
        "  if [ \"$rc\" -ne 0 ]; then",
        "    why=''; [ \"$rc\" -eq 124 ] && why=\" (timed out: the deadline is " + str(deadline_seconds) + " s from boot)\"",
        f"    {{ echo \"fetcher {index + 1}/{count} failed (exit $rc) at: $step$why\"; tail -n 40 {log}; }} \\",
        f"      | timeout 60 aws s3 cp --only-show-errors - {failed}",
        "  fi",
        "  shutdown -h now",
        "}",
        "trap finish EXIT",
        "trap 'exit 143' TERM INT HUP",
        f"exec > >(tee {log} | logger -t kimi-k3-fetch) 2>&1",
        # A replaced fetcher clears its share's earlier failure, so the verify Job does not report a stale one.
        f"step='clear the earlier failure'; bounded aws s3 rm --only-show-errors {failed}",
        # Staging in memory: files in flight (fetch_checkpoint.PARALLEL_FILES shards) must fit; tmpfs defaults to half.
        "step='size /dev/shm'; mount -o remount,size=110G /dev/shm",
        "step='install python'; bounded dnf install -y -q python3.12 python3.12-pip",
        f"step='install huggingface_hub'; bounded python3.12 -m pip install -q 'huggingface_hub[hf_xet]=={hub_version}'",
        f"echo '{script}' | base64 -d > /opt/fetch_checkpoint.py",
        f"export MODEL_REPO={repo} MODEL_REVISION={revision} BUCKET={bucket} "
        f"PREFIX={prefix} FETCHER_INDEX={index} FETCHERS={count} STAGING=/dev/shm/kimi-k3 HF_XET_HIGH_PERFORMANCE=1",
        "step='read the token from Secrets Manager'",
        f"HF_TOKEN=$(bounded aws secretsmanager get-secret-value --secret-id {secret_arn} --query SecretString --output text)",
        "export HF_TOKEN",
        "step='fetch_checkpoint.py'; bounded python3.12 /opt/fetch_checkpoint.py",
        "exit 0",
        "",
    ])


def bucket_read_policy(bucket_arn: str) -> str:
    """What Mountpoint needs for a read-only mount (Mountpoint CONFIGURATION.md, IAM permissions)."""
    import json
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn]},
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{bucket_arn}/*"]}]}, sort_keys=True)


def fetcher_policy(bucket_arn: str, secret_arn: str) -> str:
    """What a fetcher needs: list and write the bucket (multipart included), read the token."""
    import json
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn]},
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
         "Resource": [f"{bucket_arn}/*"]},
        # Only its share's failure record (fetch_checkpoint.failure_key): never a weight file.
        {"Effect": "Allow", "Action": ["s3:DeleteObject"], "Resource": [f"{bucket_arn}/*/.kimi-k3/failed-*"]},
        {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": [secret_arn]}]}, sort_keys=True)


def mountpoint_mount_options(region: str) -> list[str]:
    """Mountpoint options (mount-s3 flags without --, as the CSI driver takes them): read-only, other users
    (the containers' uid) may read, the bucket's Region."""
    return ["read-only", "allow-other", f"region {region}"]


def efs_mount_options(cfg: StackConfig) -> list[str]:
    """GPU nodes in a Local Zone have no mount target there: name the Regional zone's (EFS mount helper `az`
    option, EFS user guide "Mounting ... on EC2 in a different Availability Zone"); TLS in transit."""
    c = cfg.cluster
    if is_local_zone(c.gpu_nodes.availability_zone, c.region):
        return ["tls", f"az={storage_zone(cfg)}"]
    return ["tls"]


def fsx_security_group_problems(ingress: list[dict[str, Any]], egress: list[dict[str, Any]]) -> list[str]:
    """What FSx for Lustre rejects or cannot serve in a file system's security group (FSx Lustre guide, "File system
    access control with Amazon VPC" and "EFA-enabled security groups"; cannot-create-fs: "allow all internal inbound
    and outbound traffic"): LNET 988 and 1018-1023 in, and all traffic to and from the group itself both ways."""
    def has(rules: list[dict[str, Any]], pred) -> bool:
        return any(pred(r) for r in rules)

    def self_all(r: dict[str, Any]) -> bool:
        return str(r.get("protocol")) == "-1" and bool(r.get("self"))

    def tcp(lo: int, hi: int):
        return lambda r: r.get("protocol") == "tcp" and r.get("from_port", r.get("fromPort")) <= lo \
            and r.get("to_port", r.get("toPort")) >= hi

    problems = []
    if not has(ingress, tcp(988, 988)) and not has(ingress, self_all):
        problems.append("no inbound LNET (tcp 988)")
    if not has(ingress, tcp(1018, 1023)) and not has(ingress, self_all):
        problems.append("no inbound LNET (tcp 1018-1023)")
    if not has(ingress, self_all):
        problems.append("no inbound all-traffic rule from the group itself")
    if not has(egress, self_all):
        problems.append("no outbound all-traffic rule to the group itself")
    return problems
