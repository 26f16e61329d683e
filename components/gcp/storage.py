"""GkeWorkloads: what the graph's pods need on GKE besides the cluster: the weights bucket (protected, retained) with
least-privilege Workload Identity bindings (the fetcher writes, readers read), its GCS FUSE PV, the compile cache on
Filestore, the DRANET ResourceClaimTemplate (A4X Max) or the multi-network objects (A4X)."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.kubernetes import register
from kimi_k3 import names
from kimi_k3.config.stack import StackConfig
from kimi_k3.gcp import plan as gke
from kimi_k3.graph.model import ServingGraph


class GkeWorkloadsArgs:
    def __init__(
        self,
        cfg: StackConfig,
        graph: ServingGraph,
        gpu_plan: gke.GkeNodePlan,
        size_gi: int,
        rdma_subnets=(),
        network: pulumi.Input[str] = "",
    ):
        self.cfg, self.graph, self.gpu_plan, self.size_gi, self.rdma_subnets = (
            cfg,
            graph,
            gpu_plan,
            size_gi,
            rdma_subnets,
        )
        self.network = network  # the cluster's VPC: the Filestore instance must be on it


class GkeWorkloads(pulumi.ComponentResource):
    ready: list[pulumi.Resource]
    compile_cache_ready: list[pulumi.Resource]
    bucket_name: Optional[pulumi.Output[str]] = None

    def __init__(
        self,
        name: str,
        args: GkeWorkloadsArgs,
        provider: k8s.Provider,
        namespace: pulumi.Resource,
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("kimi-k3:gcp:GkeWorkloads", name, None, opts)
        cfg, g = args.cfg, args.graph
        child = pulumi.ResourceOptions(parent=self)
        in_ns = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[namespace])
        self.ready, self.compile_cache_ready = [], []
        facts = g.node_facts
        for claim in facts.device_claims:  # DRANET: every GPU pod claims all of its node's RDMA NICs
            self.ready.append(
                register(f"{name}-{claim.name}-claim", gke.rdma_claim_template(g.namespace, claim), in_ns)
            )
        if not args.gpu_plan.dranet:  # A4X: Network + GKENetworkParamSet per NIC, fixed names (AICR)
            m = args.gpu_plan.machine
            for i, net in enumerate([m["gvnic_network"], *m["rdma_networks"]]):
                sub = args.rdma_subnets[i]
                params = {
                    "apiVersion": "networking.gke.io/v1",
                    "kind": "GKENetworkParamSet",
                    "metadata": {"name": net},
                    "spec": {
                        "vpc": sub["network"],
                        "vpcSubnet": sub["subnetwork"],
                        "deviceMode": "NetDevice" if i == 0 else "RDMA",
                    },
                }
                network = {
                    "apiVersion": "networking.gke.io/v1",
                    "kind": "Network",
                    "metadata": {"name": net},
                    "spec": {
                        "type": "Device",
                        "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": net},
                    },
                }
                p = register(f"{name}-{net}-params", params, pulumi.ResourceOptions(parent=self, provider=provider))
                self.ready += [
                    p,
                    register(
                        f"{name}-{net}-network",
                        network,
                        pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[p]),
                    ),
                ]
        if cfg.storage.resolved_kind != "gcs":
            self.register_outputs({})
            return
        gc = cfg.cluster.gke
        # Retained and protected like the S3 bucket: the weights outlive the cluster (docs/gke.md, Teardown).
        bucket = gcp.storage.Bucket(
            f"{name}-weights",
            project=gc.project,
            location=gc.region,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=False,
            opts=pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True),
        )
        self.bucket_name = bucket.name
        for who, role, member in gke.bucket_bindings(cfg, g.namespace):
            self.ready.append(
                gcp.storage.BucketIAMMember(
                    f"{name}-weights-{who}", bucket=bucket.name, role=role, member=member, opts=child
                )
            )
        for ksa in (gke.FETCHER_SA, gke.WORKER_SA):
            self.ready.append(
                register(
                    f"{name}-{ksa}",
                    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ksa, "namespace": g.namespace}},
                    in_ns,
                )
            )
        pv = gke.weights_pv(names.NAMES["pvc"], bucket.name, args.size_gi, g.namespace, names.NAMES["pvc"])
        self.ready.append(
            k8s.core.v1.PersistentVolume(
                f"{name}-weights-pv",
                metadata=pv["metadata"],
                spec=pv["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=provider, retain_on_delete=True),
            )
        )
        if g.compile_cache:
            sc = register(
                f"{name}-filestore-class",
                gke.filestore_storage_class(args.network),
                pulumi.ResourceOptions(parent=self, provider=provider),
            )
            claim = gke.compile_cache_pvc(g.namespace, names.NAMES["compile_cache"])
            self.compile_cache_ready.append(
                register(
                    f"{name}-compile-cache-pvc",
                    claim,
                    pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[namespace, sc]),
                )
            )
        self.register_outputs({"bucket": bucket.name})
