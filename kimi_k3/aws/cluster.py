"""nodes.py -> cluster.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from kimi_k3.config.base import ConfigError
from kimi_k3.config.cluster import ClusterConfig
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file


def addon_version(kubernetes_version: str, addon: str) -> str | None:
    """The pinned version of an EKS add-on for this Kubernetes minor (recipes/facts/aws.yaml), or None: EKS's default."""
    return recipe_file("facts/aws.yaml")["eks_addon_versions"][kubernetes_version].get(addon)


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
            out.append(f"{r['name']}: {i['addonName']} is not pinned (recipes/facts/aws.yaml eks_addon_versions)")
        elif i["addonName"] == "kube-proxy" and not str(v).startswith(f"v{minor}."):
            out.append(f"{r['name']}: kube-proxy {v} is not built for Kubernetes {minor}")
    return out


def endpoint_access(c: ClusterConfig) -> dict[str, Any]:
    """The EKS API endpoint's vpc_config part. Private always; public only for the CIDRs the user names, never the
    whole internet unless `allowPublicEndpointFromAnywhere` says so."""
    key = "kimi-k3:cluster"
    if not c.endpoint_public_access:
        if c.public_access_cidrs:
            raise ConfigError(
                f"{key}.publicAccessCidrs = {c.public_access_cidrs}: the public endpoint is off "
                f"(endpointPublicAccess: false); allowed: none"
            )
        return {"endpoint_private_access": True, "endpoint_public_access": False}
    if not c.public_access_cidrs:
        raise ConfigError(
            f"{key}.publicAccessCidrs: required while the public API endpoint is on; allowed: the "
            "IPv4 CIDRs where pulumi and kubectl run, e.g. 203.0.113.0/24 (pulumi config set --path "
            "'kimi-k3:cluster.publicAccessCidrs[0]' ...), or endpointPublicAccess: false (run pulumi "
            "inside the VPC)"
        )
    anywhere = [cidr for cidr in c.public_access_cidrs if ipaddress.IPv4Network(cidr).prefixlen == 0]
    if anywhere and not c.allow_public_endpoint_from_anywhere:
        raise ConfigError(
            f"{key}.publicAccessCidrs = {c.public_access_cidrs}: {anywhere[0]} opens the EKS API "
            "endpoint to the whole internet; allowed: narrower CIDRs, or "
            f"{key}.allowPublicEndpointFromAnywhere: true to accept that"
        )
    return {
        "endpoint_private_access": True,
        "endpoint_public_access": True,
        "public_access_cidrs": list(c.public_access_cidrs),
    }


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
        out += [
            f"{clusters[0]['name']}: bootstrapSelfManagedAddons is false but no {a} add-on is installed"
            for a in ("vpc-cni", "kube-proxy", "coredns")
            if a not in addons
        ]
    cni = addons.get("vpc-cni")
    for r in resources:
        if (
            r["type"] == "aws:eks/nodeGroup:NodeGroup"
            and bootstrapped
            and (cni is None or cni["urn"] not in r.get("dependsOn", []))
        ):
            out.append(
                f"{r['name']}: its nodes can join before the vpc-cni add-on gives aws-node its own role, and "
                "EKS's self-managed aws-node would keep the node role (no CNI policy): no pod IPs"
            )
    return out


@dataclass(frozen=True)
class SubnetPlan:
    name: str
    zone: str
    cidr: str
    public: bool
    role: str  # "system" | "gpu" | "public"


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


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (the AWS CLI on the machine running pulumi)."""
    import json

    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": cluster_name,
            "clusters": [
                {"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}
            ],
            "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
            "users": [
                {
                    "name": cluster_name,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region],
                            "interactiveMode": "Never",
                        }
                    },
                }
            ],
        },
        sort_keys=True,
    )
