"""The Kimi K3 DynamoGraphDeployment and the ComputeDomains its multinode workers claim."""
from __future__ import annotations

from typing import Optional, Sequence

import pulumi

from kimi_k3 import manifests
from kimi_k3.graph import ServingGraph as Graph

from .kubernetes import register


class ServingGraphArgs:
    def __init__(self, graph: Graph, wait_for: Sequence[pulumi.Resource]):
        """
        :param graph: roles, TP, nodes, flags and env of the selected recipe with stack overrides.
        :param wait_for: what must exist before workers start (the verified download, the operator, the DRA driver).
        """
        self.graph = graph
        self.wait_for = list(wait_for)


class ServingGraph(pulumi.ComponentResource):
    """One ComputeDomain per multinode role, then the graph, which `pulumi up` waits on until Ready."""

    deployment: pulumi.CustomResource

    def __init__(self, name: str, args: ServingGraphArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:serving:ServingGraph", name, None, opts)
        g = args.graph
        domains = [
            register(f"{name}-{role.key}-compute-domain", manifests.compute_domain(g, role),
                     pulumi.ResourceOptions(parent=self, depends_on=args.wait_for))
            for role in g.roles
        ]
        self.deployment = register(f"{name}-deployment", manifests.graph_deployment(g), pulumi.ResourceOptions(
            parent=self, depends_on=args.wait_for + domains))
        self.register_outputs({"name": self.deployment.metadata["name"], "gpus": g.gpus, "nodes": g.nodes})
