"""A ComputeDomain the provider made for the rack (kimi-k3:cluster.computeDomain.provided): what `render` assumes the
cluster holds, and the check `up` runs on the object it reads from the cluster before any role claims its channel.

CoreWeave CKS creates one ComputeDomain per GB200/GB300 rack when the rack joins the cluster (docs.coreweave.com,
products/cks/clusters/scheduling/imex-dra-scheduling). The DRA driver makes its channel ResourceClaimTemplate in the
ComputeDomain's namespace (NVIDIA/k8s-dra-driver-gpu cmd/compute-domain-controller/computedomain.go) and refuses a
claim from any other (cmd/compute-domain-kubelet-plugin/computedomain.go AssertComputeDomainNamespace); a pod names a
template of its own namespace (core/v1 PodResourceClaim.resourceClaimTemplateName). So the graph runs in the domain's
namespace and claims the provider's template as it is: nothing is created to join it."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from kimi_k3.graph.model import ProvidedDomain, ServingGraph
from kimi_k3.k8s.objects import Obj

API_VERSION = "resource.nvidia.com/v1beta1"  # the DRA driver's ComputeDomain CRD (recipes/platform/platform-set.yaml)
TYPE = f"kubernetes:{API_VERSION}:ComputeDomain"  # its Pulumi type token (what a read registers as)
KEY = "kimi-k3:cluster.computeDomain.provided"


def assumption(graph: ServingGraph) -> Optional[str]:
    """What a graph on a provider's ComputeDomain takes for granted offline, in one line (None: it makes its own)."""
    p = graph.provided_compute_domain
    if p is None:
        return None
    return (
        f"assumes ComputeDomain {p.name} in namespace {p.namespace} exists, spanning {p.nodes} nodes, with channel "
        f"template {p.channel_template} (the graph's roles claim it on {graph.nodes} nodes); checked at `up`"
    )


def assumed_object(p: ProvidedDomain) -> Obj:
    """The ComputeDomain the stack says is there: what `kimi-k3 render` reads in place of the cluster's."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": p.name, "namespace": p.namespace},
        "spec": {"numNodes": p.nodes, "channel": {"resourceClaimTemplate": {"name": p.channel_template}}},
    }


def assumed_from_config(config: Mapping[str, str], resource_id: str) -> dict[str, Any]:
    """The assumed object for a read of `resource_id` (namespace/name), from a stack's raw `kimi-k3:cluster`
    value; {} (absent) for any other id."""
    try:
        provided = (json.loads(config.get("kimi-k3:cluster") or "{}").get("computeDomain") or {}).get("provided")
    except (ValueError, AttributeError):
        return {}
    if not isinstance(provided, dict) or f"{provided.get('namespace')}/{provided.get('name')}" != resource_id:
        return {}
    p = ProvidedDomain(provided["name"], provided["namespace"], provided["channelTemplate"], provided["nodes"])
    return assumed_object(p)


def domain_problem(state: Optional[Mapping[str, Any]], graph: ServingGraph) -> Optional[str]:
    """Why the ComputeDomain read from the cluster cannot hold the graph (None: it can). One line naming the key."""
    p = graph.provided_compute_domain
    assert p is not None
    where = f"{KEY}: ComputeDomain {p.name} in namespace {p.namespace}"
    meta = (state or {}).get("metadata") or {}
    if not meta.get("name"):
        return f"{where} is not in the cluster; allowed: a ComputeDomain that exists (kubectl get computedomains -A)"
    if meta.get("deletionTimestamp"):
        return f"{where} is being deleted; allowed: a ComputeDomain that is not terminating"
    spec = (state or {}).get("spec") or {}
    template = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
    if template != p.channel_template:
        return (
            f"{where} makes channel template {template!r}, not channelTemplate = {p.channel_template!r}; "
            f"allowed: {template!r}"
        )
    num = int(spec.get("numNodes") or 0)  # 0: daemons join on demand, wherever the claiming pods land
    if num and num < graph.nodes:
        return (
            f"{where} spans spec.numNodes = {num} nodes, but the graph's roles take {graph.nodes} nodes, all inside "
            f"it; allowed: a ComputeDomain of {graph.nodes} nodes or more, or fewer replicas"
        )
    if num and num != p.nodes:
        return f"{where} spans spec.numNodes = {num} nodes, not nodes = {p.nodes}; allowed: {num}"
    return None
