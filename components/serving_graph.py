"""The Kimi K3 DynamoGraphDeployment and the ComputeDomains its multinode workers claim."""
from __future__ import annotations

from typing import Optional, Sequence

import pulumi

from kimi_k3 import manifests
from kimi_k3.graph import ServingGraph as Graph

from .kubernetes import register


class ServingGraphArgs:
    def __init__(self, graph: Graph, platform_ready: Sequence[pulumi.Resource],
                 workers_ready: Sequence[pulumi.Resource]):
        """
        :param graph: roles, TP, nodes, flags and env of the selected recipe with stack overrides.
        :param platform_ready: what ComputeDomains and the graph need to be accepted (the namespace, the DRA
            driver and the Dynamo operator that serve their CRDs).
        :param workers_ready: what the graph's pods need besides (the verified weights, the GPU nodes).
        """
        self.graph = graph
        self.platform_ready = list(platform_ready)
        self.workers_ready = list(workers_ready)


class ServingGraph(pulumi.ComponentResource):
    """One ComputeDomain per multinode role, then the graph, which `pulumi up` waits on until Ready."""

    deployment: pulumi.CustomResource

    def __init__(self, name: str, args: ServingGraphArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:serving:ServingGraph", name, None, opts)
        g = args.graph
        domains = [
            register(f"{name}-{role.key}-compute-domain", manifests.compute_domain(g, role),
                     pulumi.ResourceOptions(parent=self, depends_on=args.platform_ready))
            for role in g.roles
        ]
        self.deployment = register(f"{name}-deployment", manifests.graph_deployment(g), pulumi.ResourceOptions(
            parent=self, depends_on=args.platform_ready + args.workers_ready + domains))
        self.register_outputs({"name": self.deployment.metadata["name"], "gpus": g.gpus, "nodes": g.nodes})
