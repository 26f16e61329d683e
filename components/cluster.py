"""The Kubernetes cluster the serving graph lands on, and its namespace."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.kubernetes import register
from kimi_k3.config.cluster import ClusterConfig
from kimi_k3.graph.model import ServingGraph
from kimi_k3.k8s import objects, provided_domain


class ClusterArgs:
    def __init__(self, cluster: ClusterConfig, graph: ServingGraph, kubeconfig: Optional[pulumi.Input[str]] = None):
        """
        :param cluster: `kimi-k3:cluster` — `eks` (the GpuCluster's kubeconfig), `existing` (kubeconfig/context)
            or `render` (YAML to a directory).
        :param graph: the serving graph; its namespace is created here.
        :param kubeconfig: secret kubeconfig contents: the EKS cluster's in `eks` mode; for `existing`, the stack
            secret, or None for $KUBECONFIG / ~/.kube/config.
        """
        self.cluster = cluster
        self.graph = graph
        self.kubeconfig = kubeconfig


class Cluster(pulumi.ComponentResource):
    """A Kubernetes provider for the selected cluster mode, plus the namespace everything lives in.

    Whatever the mode, the serving components receive the same seam: this provider (in `eks` mode built from the
    GpuCluster's kubeconfig, so every Kubernetes resource waits for the control plane), a storage class and the
    GPU node facts."""

    provider: k8s.Provider
    namespace: pulumi.CustomResource

    def __init__(self, name: str, args: ClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("kimi-k3:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.cluster.mode == "render":
            self.provider = k8s.Provider(
                f"{name}-provider", render_yaml_to_directory=args.cluster.render_dir, opts=child
            )
        else:
            context = args.cluster.context if args.cluster.mode == "existing" else None
            # upsert: the model-cache PVC and namespace a `pulumi destroy` left behind (retainOnDelete) are adopted by
            # the next `up` instead of failing AlreadyExists (pulumi-kubernetes await.go Creation).
            self.provider = k8s.Provider(
                f"{name}-provider",
                kubeconfig=args.kubeconfig,
                context=context,
                upsert_existing_objects=True,
                opts=child,
            )
        namespace = objects.namespace(args.graph)
        self.provided_domain = None  # (the read, the checked channel template) on a provider's ComputeDomain
        if args.graph.provided_compute_domain is not None:
            self.provided_domain = read_provided_domain(f"{name}-provided-compute-domain", args.graph, self)
            # Nothing of the graph's exists before the check: everything waits for the namespace, which waits for it.
            ns = namespace["metadata"]["name"]
            namespace = {
                **namespace,
                "metadata": {**namespace["metadata"], "name": self.provided_domain[1].apply(lambda _: ns)},
            }
        # Retained: deleting a namespace deletes the model-cache PVC inside it.
        self.namespace = register(
            f"{name}-namespace",
            namespace,
            pulumi.ResourceOptions(parent=self, provider=self.provider, retain_on_delete=True),
        )
        self.register_outputs({"namespace": self.namespace.metadata["name"]})


def read_provided_domain(name: str, graph: ServingGraph, cluster: Cluster) -> tuple[pulumi.Resource, pulumi.Output]:
    """Discovery at `up` (and `preview`: read steps run there too): the provider's ComputeDomain read from the cluster
    and checked against what the graph needs; a failed check ends the run in one line (a RunError: the language host
    logs its message, no traceback), before the namespace. The engine itself fails the read of an object that does not
    exist ("resource 'NS/NAME' does not exist": pulumi/pulumi pkg/resource/deploy/step.go ReadStep.Apply).
    Returns (the read, its channel template's name once checked)."""
    p = graph.provided_compute_domain
    # A raw read: pulumi_kubernetes' CustomResource.get in Python exposes no metadata/spec outputs to check.
    found = pulumi.CustomResource(
        provided_domain.TYPE,
        name,
        {"apiVersion": None, "kind": None, "metadata": None, "spec": None},
        pulumi.ResourceOptions(parent=cluster, provider=cluster.provider, id=p.id),
    )

    def checked(parts):
        problem = provided_domain.domain_problem({"metadata": parts[0], "spec": parts[1]}, graph)
        if problem:
            raise pulumi.RunError(f"Pulumi.{pulumi.get_stack()}.yaml: {problem}")
        return p.channel_template

    return found, pulumi.Output.all(found.metadata, found.spec).apply(checked)
