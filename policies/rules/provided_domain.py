"""A graph on the provider's ComputeDomain (kimi-k3:cluster.computeDomain.provided): every role that moves KV or its
TP group over NVLink claims that domain's channel, in its namespace, and the stack creates no ComputeDomain of its
own (each ComputeDomain is its own IMEX domain: a pod cannot import memory exported in another)."""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from kimi_k3.k8s.deployment import PROVIDED_DOMAIN_ANNOTATION
from policies.rules.base import Context, Finding, Result, _is, name_of, node_count, pod_spec, target_of, workers
from policies.rules.kv_transport import kv_over_nvlink


def provided_channel_templates(objects: Sequence[Mapping]) -> set[str]:
    """Channel templates of provided ComputeDomains the stack's graphs name (the cluster has them, not the stack)."""
    return {
        str(ann[f"{PROVIDED_DOMAIN_ANNOTATION}-channel"])
        for o in objects
        if _is(o, "DynamoGraphDeployment")
        for ann in [(o.get("metadata") or {}).get("annotations") or {}]
        if ann.get(f"{PROVIDED_DOMAIN_ANNOTATION}-channel")
    }


def _claimed_templates(comp: Mapping, container: Mapping) -> list[str]:
    """Templates the container's claims map to through the pod's resourceClaims (a dangling claim maps to none)."""
    by_name = {c.get("name"): c.get("resourceClaimTemplateName") for c in pod_spec(comp).get("resourceClaims") or []}
    used = [by_name.get(c.get("name")) for c in (container.get("resources") or {}).get("claims") or []]
    return sorted({str(t) for t in used if t})


def check_nvlink_roles_in_provided_domain(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    own = sorted(str((o.get("metadata") or {}).get("name")) for o in objects if _is(o, "ComputeDomain"))
    for obj in objects:
        meta = obj.get("metadata") or {}
        ann = meta.get("annotations") or {}
        if not _is(obj, "DynamoGraphDeployment") or not ann.get(PROVIDED_DOMAIN_ANNOTATION):
            continue
        domain, template = str(ann[PROVIDED_DOMAIN_ANNOTATION]), str(ann.get(f"{PROVIDED_DOMAIN_ANNOTATION}-channel"))
        namespace = domain.split("/", 1)[0]
        if own:
            yield Finding(
                target_of(obj),
                f"the graph claims the provider's ComputeDomain {domain}, but the stack also creates ComputeDomain "
                f"{', '.join(own)}: a second IMEX domain on the same rack; create none",
            )
        if (meta.get("namespace") or "default") != namespace:
            yield Finding(
                target_of(obj),
                f"the graph runs in namespace {meta.get('namespace') or 'default'!r} but ComputeDomain {domain} is in "
                f"{namespace!r}: the DRA driver refuses a channel claim from another namespace",
            )
        for comp, container, tokens in workers(obj):
            if node_count(comp) < 2 and not kv_over_nvlink(container, tokens):
                continue
            claimed = _claimed_templates(comp, container)
            if claimed != [template]:
                yield Finding(
                    target_of(obj),
                    f"component {name_of(comp)} moves KV or its TP group over NVLink but claims "
                    f"{claimed or 'no channel'}, not {template!r}, the channel of the provided ComputeDomain {domain}",
                )
