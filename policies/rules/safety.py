"""Safety: pinned images, secrets, privileges, startup budget, a retained model cache."""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from kimi_k3.images import image_tag, names_runtime_version, pin_problem
from policies.rules.base import (
    name_of, shown,
    CACHE_FILESYSTEM_TYPES,
    COMPILE_CACHE_SUFFIX,
    Context,
    DEFAULT_MIN_STARTUP_SECONDS,
    Finding,
    HF_TOKEN_VARS,
    PROBE_DEFAULTS,
    Result,
    Skipped,
    all_containers,
    components,
    main_container,
    model_mount,
    pod_spec,
    pod_specs,
    resolved_model,
    target_of,
    workers,
)


def check_images_pinned(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            problem = pin_problem(container.get("image"))
            if problem:
                yield Finding(target_of(obj), f"{label} container {name_of(container)}: {problem}")


def check_runtime_version_declared(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        image = (main_container(comp) or {}).get("image") or ""
        if names_runtime_version(image) or comp.get("runtimeVersionOverride"):
            continue
        yield Finding(target_of(obj), f"component {name_of(comp)}: image tag {image_tag(image)!r} is not a plain "
                      "MAJOR.MINOR.PATCH Dynamo version (a pre-release orders before its release); "
                      "set runtimeVersionOverride")


def check_hf_token_from_secret(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            for entry in container.get("env") or []:
                if entry.get("name") in HF_TOKEN_VARS and "value" in entry:
                    yield Finding(target_of(obj), f"{label} container {name_of(container)}: {entry['name']} is "
                                  "a literal env value; use valueFrom.secretKeyRef or envFrom a Secret")


def check_serving_containers_unprivileged(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            if (container.get("securityContext") or {}).get("privileged"):
                yield Finding(target_of(obj), f"{label} container {name_of(container)}: privileged")


def check_startup_budget_covers_load(obj: Mapping, ctx: Context) -> Iterator[Result]:
    need = int(ctx.config.get("min_startup_seconds", DEFAULT_MIN_STARTUP_SECONDS))
    for comp, container, _ in workers(obj):
        probe = container.get("startupProbe")
        if probe is None:
            yield Finding(target_of(obj), f"component {name_of(comp)}: no startupProbe; loading takes ~{need} s")
            continue
        p = {**PROBE_DEFAULTS, **probe}
        budget = int(p["initialDelaySeconds"]) + int(p["periodSeconds"]) * int(p["failureThreshold"])
        if budget < need:
            yield Finding(target_of(obj), f"component {name_of(comp)}: startup budget {budget} s < {need} s "
                          "estimated load time")


def model_cache_claims(objects: Sequence[Mapping]) -> set[str]:
    """Claim names of PVC volumes that hold a worker's model path."""
    claims = set()
    for obj in objects:
        for comp, container, tokens in workers(obj):
            _, value = resolved_model(container, tokens)
            found = model_mount(container, pod_spec(comp), value) if value and value.startswith("/") else None
            pvc = (found[1].get("persistentVolumeClaim") or {}) if found else {}
            if pvc.get("claimName"):
                claims.add(pvc["claimName"])
    return claims


def check_model_cache_retained(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    claims = model_cache_claims(objects)
    if not claims:
        return
    if ctx.resources is None:
        for claim in sorted(claims):
            yield Skipped(f"PersistentVolumeClaim/{claim}", "only manifests known: protect/retainOnDelete need "
                          "Pulumi resource options (check a stack or a render directory with resources.json)")
        return
    by_key = {r.key: r for r in ctx.resources if r.key}
    pvcs = [(claim, by_key.get(f"PersistentVolumeClaim/{claim}")) for claim in sorted(claims)]
    for claim, res in pvcs:
        if res is None:
            yield Finding(f"PersistentVolumeClaim/{claim}", "model-cache claim is not managed by this stack")
    cache = [res for _, res in pvcs if res] + [r for r in ctx.resources if r.type in CACHE_FILESYSTEM_TYPES
                                               and not r.name.endswith(COMPILE_CACHE_SUFFIX)]
    for res in cache:
        target = res.key or f"{res.type}/{res.name}"
        if res.key and res.protect:
            # A protected Kubernetes object keeps its provider, so `pulumi destroy --exclude-protected` keeps the
            # cluster, and a plain `pulumi destroy` stops: teardown must pass with the weights retained.
            yield Finding(target, "model-cache claim is protect: pulumi destroy cannot run and a teardown keeps "
                          "the cluster; use retainOnDelete alone")
        if res.retain_on_delete:
            continue
        if res.retain_on_delete is None:
            yield Skipped(target, "retainOnDelete is not visible to a policy pack")
        else:
            yield Finding(target, "model cache is not retainOnDelete: a destroy, or an unprotect then destroy, "
                          "or a replacement deletes ~1.5 TB of weights")
