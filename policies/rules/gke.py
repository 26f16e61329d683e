"""GKE A4X Max (GB300, a4x-maxgpu-4g-metal): a pod bound for it schedules only if it selects the accelerator network
profile label and claims the node's DRANET RDMA NICs (NVIDIA/aicr docs/integrator/gke-a4x-max-networking.md)."""

from typing import Iterator, Mapping, Optional, Sequence

from kimi_k3.data import recipe_file
from policies.rules.base import Context, Finding, Result, all_containers, gpus, pod_specs, target_of
from policies.rules.gke_pool import gke_gpu_pool


def _facts() -> tuple[dict, dict]:
    f = recipe_file("facts/gcp.yaml")
    return f["labels"], f["machine_types"]["a4x-maxgpu-4g-metal"]


def _pinned(spec: Mapping, key: str) -> Optional[set]:
    """The values a pod requires for node label `key` (nodeSelector or every required affinity term), else None."""
    selected = (spec.get("nodeSelector") or {}).get(key)
    if selected:
        return {selected}
    terms = (
        (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms")
    ) or []
    per_term = [
        {
            v
            for e in t.get("matchExpressions") or []
            if e.get("key") == key and e.get("operator") == "In"
            for v in e.get("values") or []
        }
        for t in terms
    ]
    return set().union(*per_term) if per_term and all(per_term) else None


def _bound_for_a4x_max(spec: Mapping, labels: Mapping, machine: Mapping, a4x_max_pool: bool) -> bool:
    """Pinned to A4X Max by node label, or (the stack has an A4X Max GPU pool) a pod that requests GPUs."""
    types = _pinned(spec, labels["instance_type"]) or set()
    accels = _pinned(spec, labels["accelerator"]) or set()
    if "a4x-maxgpu-4g-metal" in types or machine["accelerator"] in accels:
        return True
    return a4x_max_pool and any(gpus(c) for c in all_containers(spec))


def check_a4x_max_pods_schedule(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    labels, machine = _facts()
    profile_key, device_class = labels["network_profile"], machine["dranet_device_class"]
    rdma_templates = {
        (o.get("metadata") or {}).get("name")
        for o in objects
        if o.get("kind") == "ResourceClaimTemplate"
        and any(
            ((r.get("exactly") or {}).get("deviceClassName") == device_class)
            for r in (((o.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
        )
    }
    # The stack's own GPU pool (Pulumi resources, when known) says where its GPU pods land.
    a4x_max_pool = any(
        gke_gpu_pool(r.type, r.aws_inputs or {})[1] == "a4x-maxgpu-4g-metal" for r in ctx.resources or []
    )
    for obj in objects:
        for where, spec in pod_specs(obj):
            if not _bound_for_a4x_max(spec, labels, machine, a4x_max_pool):
                continue
            if machine["network_profile"] not in (_pinned(spec, profile_key) or set()):
                yield Finding(
                    target_of(obj),
                    f"{where}: bound for a4x-maxgpu-4g-metal but does not select {profile_key}: "
                    f"{machine['network_profile']} (nodeSelector); GKE schedules no pod onto that pool without it",
                )
            if not any(gpus(c) for c in all_containers(spec)):
                continue
            claims = {c.get("name"): c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or []}
            rdma = {n for n, t in claims.items() if t in rdma_templates}
            used = {c.get("name") for k in all_containers(spec) for c in (k.get("resources") or {}).get("claims") or []}
            if not rdma & used:
                yield Finding(
                    target_of(obj),
                    f"{where}: a GPU pod on a4x-maxgpu-4g-metal claims no {device_class} devices (a container "
                    f"claim of a ResourceClaimTemplate requesting deviceClassName {device_class}; known: "
                    f"{sorted(filter(None, rdma_templates))}); RDMA is whole-node and only DRANET hands it out",
                )
