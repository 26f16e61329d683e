"""GkeCluster: VPC, Cloud NAT, a private GKE cluster with Workload Identity and the GCS FUSE / Filestore CSI drivers,
the system pool and the GPU pool (A4X Max: DRANET + accelerator network profile; A4X: multi-networking RDMA VPC).
Registers only what kimi_k3/gcp/plan.py returns; the serving graph receives a kubeconfig and node facts."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp

from kimi_k3.config.stack import StackConfig
from kimi_k3.gcp import plan as gke


class GkeClusterArgs:
    def __init__(self, cfg: StackConfig, gpu_plan: gke.GkeNodePlan):
        """
        :param cfg: the stack's typed config (`kimi-k3:cluster.gke` and the recipe).
        :param gpu_plan: the validated GPU pool (kimi_k3.gcp.plan.gpu_node_plan).
        """
        self.cfg = cfg
        self.gpu_plan = gpu_plan


def kubeconfig(name: str, endpoint: str, ca: str) -> str:
    """A kubeconfig that authenticates through gke-gcloud-auth-plugin (GKE's client auth; no static credential)."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {name}\n  cluster:\n    server: https://{endpoint}\n"
        f"    certificate-authority-data: {ca}\n"
        f"contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n"
        f"current-context: {name}\n"
        f"users:\n- name: {name}\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n"
        "      command: gke-gcloud-auth-plugin\n      provideClusterInfo: true\n"
    )


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    system_nodes: gcp.container.NodePool
    gpu_nodes: gcp.container.NodePool
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: GkeClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:gcp:GkeCluster", name, None, opts)
        cfg, p = args.cfg, args.gpu_plan
        g = cfg.cluster.gke
        child = pulumi.ResourceOptions(parent=self)
        base = {"project": g.project}
        vpc = gcp.compute.Network(f"{name}-vpc", auto_create_subnetworks=False, **base, opts=child)
        self.network_name = vpc.name  # Filestore's StorageClass names it (recipes/facts/gcp.yaml filestore)
        subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            network=vpc.id,
            region=g.region,
            ip_cidr_range=g.subnet_cidr,
            private_ip_google_access=True,  # private nodes reach GCS and the Google APIs without NAT
            secondary_ip_ranges=[
                {"range_name": "pods", "ip_cidr_range": g.pods_cidr},
                {"range_name": "services", "ip_cidr_range": g.services_cidr},
            ],
            **base,
            opts=child,
        )
        router = gcp.compute.Router(f"{name}-router", network=vpc.id, region=g.region, **base, opts=child)
        # Private nodes pull images and the download Job reaches the Hub through Cloud NAT.
        self.nat = gcp.compute.RouterNat(
            f"{name}-nat",
            router=router.name,
            region=g.region,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            **base,
            opts=child,
        )
        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            location=g.region,
            node_locations=[g.zone],
            network=vpc.id,
            subnetwork=subnet.id,
            remove_default_node_pool=True,
            initial_node_count=1,
            min_master_version=g.version,
            release_channel={"channel": gke.facts()["release_channel"]},
            deletion_protection=True,
            datapath_provider="ADVANCED_DATAPATH",
            enable_multi_networking=not p.dranet,  # A4X: RDMA NICs as additional node networks
            ip_allocation_policy={"cluster_secondary_range_name": "pods", "services_secondary_range_name": "services"},
            private_cluster_config={
                "enable_private_nodes": True,
                "enable_private_endpoint": g.private_endpoint,
                "master_ipv4_cidr_block": g.master_cidr,
            },
            master_authorized_networks_config={
                "cidr_blocks": [
                    {"cidr_block": c, "display_name": f"authorized-{i}"} for i, c in enumerate(g.authorized_networks)
                ]
            },
            workload_identity_config={"workload_pool": f"{g.project}{gke.facts()['workload_pool_suffix']}"},
            addons_config={
                "gcs_fuse_csi_driver_config": {"enabled": True},
                "gcp_filestore_csi_driver_config": {"enabled": True},
            },
            **base,
            opts=child,
        )
        pool_base = {"cluster": self.cluster.id, "location": g.region, "node_locations": [g.zone], **base}
        sys = g.system_nodes
        self.system_nodes = gcp.container.NodePool(
            f"{name}-system-nodes",
            node_count=sys.count,
            node_config={
                "machine_type": sys.machine_type,
                "disk_size_gb": sys.disk_gib,
                "image_type": "COS_CONTAINERD",
                "labels": gke.SYSTEM_LABELS,
                "workload_metadata_config": {"mode": "GKE_METADATA"},  # pods get Workload Identity, not the node SA
                "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            },
            **pool_base,
            opts=child,
        )
        m = p.machine
        # One NVLink domain: a HIGH_THROUGHPUT workload policy with accelerator-topology 1x72 (AICR, A4X Max).
        policy = gcp.compute.ResourcePolicy(
            f"{name}-gpu-placement",
            region=g.region,
            workload_policy={"type": "HIGH_THROUGHPUT", "accelerator_topology": m["accelerator_topology"]},
            **base,
            opts=child,
        )
        network_config: dict = {}
        gpu_deps: list[pulumi.Resource] = [self.system_nodes]  # GKE runs one node-pool operation at a time per cluster
        if p.dranet:
            network_config = {"accelerator_network_profile": m["network_profile"]}
        else:
            network_config = {"additional_node_network_configs": self._rdma_networks(name, cfg, m, base, child)}
        self.gpu_nodes = gcp.container.NodePool(
            f"{name}-gpu-nodes",
            node_count=p.nodes,
            placement_policy={"type": "COMPACT", "policy_name": g.gpu_nodes.placement_policy or policy.name},
            network_config=network_config,
            node_config={
                "machine_type": p.machine_type,
                "image_type": m["image_types"][0],
                "guest_accelerators": [
                    {
                        "type": m["accelerator"],
                        "count": m["gpus"],
                        "gpu_driver_installation_config": {"gpu_driver_version": "LATEST"},
                    }
                ],
                "reservation_affinity": {
                    "consume_reservation_type": "SPECIFIC_RESERVATION",
                    "key": "compute.googleapis.com/reservation-name",
                    "values": [p.reservation],
                },
                "labels": gke.gpu_node_labels(p),
                "taints": [gke.GPU_TAINT],
                "workload_metadata_config": {"mode": "GKE_METADATA"},
                # The machine type's bundled Local SSDs (count 0 = all of them) as the node's RAID0 ephemeral storage,
                # where the node-local weight copies live (recipes/facts/gcp.yaml local_ssd).
                **({"ephemeral_storage_local_ssd_config": {"local_ssd_count": 0}} if m.get("local_ssd") else {}),
                **(
                    {"linux_node_config": {"hugepages_config": {"hugepage_size2m": m["hugepages_2m"]}}}
                    if m.get("hugepages_2m")
                    else {}
                ),
                "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            },
            **pool_base,
            opts=pulumi.ResourceOptions(parent=self, depends_on=gpu_deps),
        )
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.name, self.cluster.endpoint, self.cluster.master_auth).apply(
                lambda a: kubeconfig(a[0], a[1], (a[2] or {}).get("cluster_ca_certificate", ""))
            )
        )
        self.register_outputs({"clusterName": self.cluster.name})

    def _rdma_networks(self, name, cfg, m, base, child) -> list[dict]:
        """A4X: one gVNIC VPC + subnet and one RDMA VPC with four subnets (AICR gke-gb200-networking.md step 1)."""
        g = cfg.cluster.gke
        gvnic = gcp.compute.Network(f"{name}-gvnic", auto_create_subnetworks=False, mtu=8896, **base, opts=child)
        gsub = gcp.compute.Subnetwork(
            f"{name}-gvnic-sub", network=gvnic.id, region=g.region, ip_cidr_range="192.168.0.0/24", **base, opts=child
        )
        rdma = gcp.compute.Network(
            f"{name}-rdma",
            auto_create_subnetworks=False,
            mtu=8896,
            network_profile=f"projects/{g.project}/global/networkProfiles/{g.zone}-vpc-roce",
            **base,
            opts=child,
        )
        configs = [{"network": gvnic.name, "subnetwork": gsub.name}]
        for i, _ in enumerate(m["rdma_networks"]):
            sub = gcp.compute.Subnetwork(
                f"{name}-rdma-sub-{i}",
                network=rdma.id,
                region=g.region,
                ip_cidr_range=f"192.168.{i + 1}.0/24",
                **base,
                opts=child,
            )
            configs.append({"network": rdma.name, "subnetwork": sub.name})
        self.rdma_subnets = configs
        return configs
