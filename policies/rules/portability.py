"""Portability: a manifest runs on a user's cluster, not only where it was written (no private registry, no
development-mode server, no clique id copied from one cluster). Facts: recipes/facts/portability.yaml."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterator, Mapping

from kimi_k3.data import recipe_file
from policies.rules.base import Context, Finding, Result, all_containers, name_of, pod_specs, target_of

FACTS = "recipes/facts/portability.yaml"


@lru_cache(maxsize=1)
def _facts() -> dict[str, Any]:
    return recipe_file("facts/portability.yaml")


def image_reference(image: str) -> str:
    """The fully qualified repository of an image reference, Docker's way: python:3.12 -> docker.io/library/python."""
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:  # a tag (a ":" before the last "/" is a registry port)
        name = name.rsplit(":", 1)[0]
    first, _, rest = name.partition("/")
    if not rest:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


def registry_problem(image: str, extra: tuple[str, ...] = ()) -> str | None:
    """Why a user cannot pull `image` (None: they can)."""
    ref, reg = image_reference(image), _facts()["registries"]
    for entry in reg["denied"]:
        if ref.startswith(entry["prefix"]):
            return f"{image}: {entry['prefix']} is {entry['why']}"
    allowed = [e["prefix"] for e in reg["allowed"]] + list(extra)
    if any(ref.startswith(p) for p in allowed):
        return None
    return f"{image}: registry {ref.split('/')[0]} is not one a user can pull from; allowed: {', '.join(allowed)} ({FACTS})"


def check_images_pullable(obj: Mapping, ctx: Context) -> Iterator[Result]:
    extra = tuple(ctx.config.get("allowed_registries") or ())
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            problem = registry_problem(str(container.get("image") or ""), extra)
            if problem:
                yield Finding(target_of(obj), f"{label} container {name_of(container)}: {problem}")


def check_no_dev_mode_server(obj: Mapping, ctx: Context) -> Iterator[Result]:
    switches = _facts()["devMode"]["env"]
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            for entry in container.get("env") or []:
                name = entry.get("name")
                if name in switches and "value" in entry and str(entry["value"]) != switches[name]["disabled"]:
                    yield Finding(
                        target_of(obj),
                        f"{label} container {name_of(container)}: {name}={entry['value']} opens the server's "
                        f"development endpoints; allowed: unset or {switches[name]['disabled']!r} ({FACTS})",
                    )


def check_no_hard_coded_clique(obj: Mapping, ctx: Context) -> Iterator[Result]:
    label_key = _facts()["cliqueLabel"]
    for label, spec in pod_specs(obj):
        pinned = [
            f"nodeSelector {label_key}={v}" for k, v in (spec.get("nodeSelector") or {}).items() if k == label_key
        ]
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        for term in required.get("nodeSelectorTerms") or []:
            for expr in term.get("matchExpressions") or []:
                if expr.get("key") == label_key and expr.get("values"):
                    pinned.append(f"nodeAffinity {label_key} {expr.get('operator')} {list(expr['values'])}")
        for where in pinned:
            yield Finding(
                target_of(obj),
                f"{label}: {where}: a clique id names one NVLink domain of one cluster; allowed: a required "
                f"podAffinity with topologyKey {label_key} (the TP group shares whichever clique it lands on)",
            )


RULE_NAMES = ("images-pullable", "no-dev-mode-server", "no-hard-coded-clique")  # registered in policies/rules/__init__
