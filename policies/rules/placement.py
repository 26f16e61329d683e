"""Where the graph's request path runs: the frontend (HTTP, tokenizer, KV router) in the workers' zone."""

from typing import Iterator, Mapping, Optional

from policies.rules.base import (
    WORKER_TYPES,
    Context,
    Finding,
    Result,
    components,
    main_container,
    name_of,
    pod_spec,
    serving,
    target_of,
)

ZONE_LABEL = "topology.kubernetes.io/zone"
ROUTER_MODULES = ("dynamo.frontend", "dynamo.router")  # the frontend, or a standalone KV router
ROUTER_TYPES = ("frontend", "epp")  # DGD component types that route requests (v1beta1 CRD)


def _required_zones(spec: Mapping) -> Optional[frozenset]:
    """The zones a pod may run in by its nodeSelector or required node affinity; None when not pinned to any."""
    selected = (spec.get("nodeSelector") or {}).get(ZONE_LABEL)
    if selected:
        return frozenset([selected])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    per_term = []
    for term in terms:  # terms are ORed: every one must pin the zone
        values = [
            set(e.get("values") or [])
            for e in term.get("matchExpressions") or []
            if e.get("key") == ZONE_LABEL and e.get("operator") == "In"
        ]
        if not values:
            return None
        per_term.append(set.intersection(*values))
    return frozenset().union(*per_term) if per_term else None


def _selects(selector: Mapping, labels: Mapping) -> bool:
    """A Kubernetes LabelSelector against a pod's labels (matchLabels AND matchExpressions)."""
    if not selector:
        return False  # an empty selector in a pod affinity term matches no pods
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or [])
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and labels.get(key) in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def _routes(comp: Mapping) -> bool:
    return comp.get("type") in ROUTER_TYPES or serving(main_container(comp))[1] in ROUTER_MODULES


def check_frontend_in_workers_zone(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Every request, streamed chunk and worker KV event passes between the frontend (and its KV router) and the
    workers: nothing but a placement rule keeps them in one zone (on AWS the GPUs may sit in a Local Zone whose
    link to the Region is the only way across). Held by a required pod affinity on the zone label selecting every
    worker component's pods, or by the frontend and every worker pinned to the same single zone."""
    comps = components(obj)
    workers = [c for c in comps if c.get("type") in WORKER_TYPES]
    if not workers:
        return
    worker_zones = {name_of(w): _required_zones(pod_spec(w)) for w in workers}
    for fe in (c for c in comps if _routes(c) and c.get("type") not in WORKER_TYPES):
        spec = pod_spec(fe)
        terms = ((spec.get("affinity") or {}).get("podAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        zone_terms = [t for t in terms if t.get("topologyKey") == ZONE_LABEL]
        if any(
            all(
                _selects(
                    t.get("labelSelector") or {},
                    ((w.get("podTemplate") or {}).get("metadata") or {}).get("labels") or {},
                )
                for w in workers
            )
            for t in zone_terms
        ):
            continue
        mine = _required_zones(spec)
        if mine is not None and len(mine) == 1 and all(z == mine for z in worker_zones.values()):
            continue
        why = (
            f"its zone terms select not every worker's pods ({len(zone_terms)} term(s))"
            if zone_terms
            else "no required podAffinity on " + ZONE_LABEL + " selecting their pods"
        )
        pinned = (
            f"; zones pinned: it {sorted(mine) if mine else 'none'}, workers "
            f"{ {k: sorted(v) if v else 'none' for k, v in worker_zones.items()} }"
        )
        yield Finding(
            target_of(obj),
            f"component {name_of(fe)}: nothing keeps it in the zone of the workers "
            f"({', '.join(sorted(worker_zones))}): {why}{pinned}; every request, streamed token and KV "
            "event may then cross zones (on AWS, the Local Zone link); allowed: a required podAffinity "
            f"with topologyKey {ZONE_LABEL} selecting the workers' pods, or one zone pinned on both",
        )
