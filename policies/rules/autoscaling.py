"""Autoscaling: a planner in the graph owns the worker replicas, and nothing this program applies writes them."""

from __future__ import annotations

from typing import Iterator, Mapping

from policies.rules.base import WORKER_TYPES, Context, Finding, Result, components, name_of, target_of


def component_type(comp: Mapping) -> str:
    return str(comp.get("type") or comp.get("componentType") or "").lower()


def planner_owned(comp: Mapping) -> bool:
    """A worker component whose count the operator's scaling adapter holds (so the manifest states none)."""
    return component_type(comp) in WORKER_TYPES and "scalingAdapter" in comp and "replicas" not in comp


def check_planner_owns_worker_replicas(obj: Mapping, ctx: Context) -> Iterator[Result]:
    comps = components(obj)
    if not any(component_type(c) == "planner" for c in comps):
        return
    for comp in comps:
        if component_type(comp) not in WORKER_TYPES:
            continue
        where = f"component {name_of(comp)}"
        if "replicas" in comp:
            yield Finding(
                target_of(obj),
                f"{where}: replicas {comp['replicas']} is written by this program while the "
                "Planner scales it; the next `pulumi up` that changes anything else in the graph sends "
                "that count again (pulumi-kubernetes cannot ignoreChanges a field inside "
                "spec.components[]), and server-side apply then fails on the conflict or, forced, undoes "
                "the planner's choice; leave replicas unset (kimi_k3/graph/autoscaling.py)",
            )
        if "scalingAdapter" not in comp:
            yield Finding(
                target_of(obj),
                f"{where}: no scalingAdapter, so the planner patches the graph's replicas "
                "directly and the operator's webhook lets any writer change them back; set "
                "scalingAdapter: {} (v1beta1: setting the object opts in)",
            )
