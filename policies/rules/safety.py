"""Safety: pinned images, secrets, privileges, startup budget, a retained model cache."""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

from kimi_k3.facts.images import NODE_ARCHES, image_facts, image_tag, kube_arch, names_runtime_version, pin_problem
from kimi_k3.names import ARCH_LABEL
from kimi_k3.offline import pulumi_await
from policies.rules.base import (
    CACHE_FILESYSTEM_TYPES,
    COMPILE_CACHE_SUFFIX,
    DEFAULT_MIN_STARTUP_SECONDS,
    HF_TOKEN_VARS,
    PROBE_DEFAULTS,
    Context,
    Finding,
    Result,
    Skipped,
    all_containers,
    components,
    gpu_product,
    main_container,
    model_mount,
    name_of,
    platform_for_product,
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
        yield Finding(
            target_of(obj),
            f"component {name_of(comp)}: image tag {image_tag(image)!r} is not a plain "
            "MAJOR.MINOR.PATCH Dynamo version (a pre-release orders before its release); "
            "set runtimeVersionOverride",
        )


def check_hf_token_from_secret(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            for entry in container.get("env") or []:
                if entry.get("name") in HF_TOKEN_VARS and "value" in entry:
                    yield Finding(
                        target_of(obj),
                        f"{label} container {name_of(container)}: {entry['name']} is "
                        "a literal env value; use valueFrom.secretKeyRef or envFrom a Secret",
                    )


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
            yield Finding(
                target_of(obj), f"component {name_of(comp)}: startup budget {budget} s < {need} s estimated load time"
            )


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
            yield Skipped(
                f"PersistentVolumeClaim/{claim}",
                "only manifests known: protect/retainOnDelete need "
                "Pulumi resource options (check a stack or a render directory with resources.json)",
            )
        return
    by_key = {r.key: r for r in ctx.resources if r.key}
    pvcs = [(claim, by_key.get(f"PersistentVolumeClaim/{claim}")) for claim in sorted(claims)]
    for claim, res in pvcs:
        if res is None:
            yield Finding(f"PersistentVolumeClaim/{claim}", "model-cache claim is not managed by this stack")
    cache = [res for _, res in pvcs if res] + [
        r for r in ctx.resources if r.type in CACHE_FILESYSTEM_TYPES and not r.name.endswith(COMPILE_CACHE_SUFFIX)
    ]
    for res in cache:
        target = res.key or f"{res.type}/{res.name}"
        if res.key and res.protect:
            # A protected Kubernetes object keeps its provider, so `pulumi destroy --exclude-protected` keeps the
            # cluster, and a plain `pulumi destroy` stops: teardown must pass with the weights retained.
            yield Finding(
                target,
                "model-cache claim is protect: pulumi destroy cannot run and a teardown keeps "
                "the cluster; use retainOnDelete alone",
            )
        if res.retain_on_delete:
            continue
        if res.retain_on_delete is None:
            yield Skipped(target, "retainOnDelete is not visible to a policy pack")
        else:
            yield Finding(
                target,
                "model cache is not retainOnDelete: a destroy, or an unprotect then destroy, "
                "or a replacement deletes ~1.5 TB of weights",
            )


# A Job whose pods fail at once (after ~1 min each) must fail `pulumi up` within this many seconds.
JOB_FAILURE_BUDGET_SECONDS = 600
JOB_ATTEMPT_SECONDS = 60


def check_job_await_reports_failure(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """pulumi-kubernetes must be able to report a failed Job, with its reason, within minutes
    (kimi_k3/offline/pulumi_await.py models the provider's await, with its source)."""
    if obj.get("kind") != "Job":
        return
    kind = pulumi_await.awaiter(obj)
    timeout = pulumi_await.timeout_seconds(obj)
    if kind == "custom":
        yield Finding(
            target_of(obj),
            f"pulumi.com/waitFor {pulumi_await.wait_for_expressions(obj)} replaces "
            "pulumi-kubernetes' Job await, which fails on a Failed Job (BackoffLimitExceeded, "
            f"DeadlineExceeded); a custom condition only succeeds or times out: `up` waits {timeout} s "
            "with no reason. Drop waitFor and keep pulumi.com/timeoutSeconds",
        )
        return
    if kind != "job":
        return
    spec = obj.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is None or int(deadline) >= timeout:
        yield Finding(
            target_of(obj),
            f"activeDeadlineSeconds {deadline} is not below the provider timeout "
            f"{timeout} s: a stuck Job ends in a provider timeout that names no reason instead of "
            "DeadlineExceeded",
        )
    reported = pulumi_await.seconds_until_failure_reported(obj, JOB_ATTEMPT_SECONDS)
    if reported > JOB_FAILURE_BUDGET_SECONDS:
        yield Finding(
            target_of(obj),
            f"backoffLimit {spec.get('backoffLimit', 6)}: pods failing after "
            f"{JOB_ATTEMPT_SECONDS} s each fail the Job only after {reported} s "
            f"(> {JOB_FAILURE_BUDGET_SECONDS} s) of retries and pod backoff",
        )


def _pod_arches(spec: Mapping) -> tuple[frozenset[str], str]:
    """The kubernetes.io/arch values a pod may be scheduled on, and from what (nodeSelector, required node
    affinity, the pinned GPU product's platform), else any node architecture."""
    selected = (spec.get("nodeSelector") or {}).get(ARCH_LABEL)
    if selected:
        return frozenset({str(selected)}), "nodeSelector"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms:  # terms are ORed; a term without an arch requirement allows any arch
        arches: set[str] = set()
        for term in terms:
            exprs = [
                e
                for e in term.get("matchExpressions") or []
                if e.get("key") == ARCH_LABEL and e.get("operator") == "In"
            ]
            arches |= (
                set.intersection(*[set(map(str, e.get("values") or [])) for e in exprs]) if exprs else set(NODE_ARCHES)
            )
        if arches != set(NODE_ARCHES):
            return frozenset(arches), "required node affinity"
    platform = platform_for_product(gpu_product(spec))
    if platform is not None:
        return frozenset({kube_arch(platform.arch)}), f"GPU product {platform.gpu_product_label}"
    return frozenset(NODE_ARCHES), "no architecture pin"


def check_pods_run_on_image_arch(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """No pod may be scheduled on a node whose CPU architecture its images are not built for."""
    for label, spec in pod_specs(obj):
        arches, why = _pod_arches(spec)
        for container in all_containers(spec):
            image = container.get("image")
            known = image_facts(image).arch
            if known is None:
                yield Skipped(
                    target_of(obj),
                    f"{label} container {container.get('name')}: architectures of "
                    f"{image} unknown (record them in recipes/facts/images.yaml with their source)",
                )
            elif not arches <= known:
                yield Finding(
                    target_of(obj),
                    f"{label} container {container.get('name')}: may run on "
                    f"{', '.join(sorted(arches))} nodes ({why}) but {image} is built for "
                    f"{', '.join(sorted(known))} (recipes/facts/images.yaml); pin {ARCH_LABEL}",
                )


def check_graph_await_reports_failure(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """A DynamoGraphDeployment awaited through pulumi.com/waitFor can only become Ready or time out: a graph
    whose pods cannot run holds `pulumi up` for the whole timeout, with no reason."""
    if obj.get("kind") != "DynamoGraphDeployment" or pulumi_await.awaiter(obj) != "custom":
        return
    yield Finding(
        target_of(obj),
        f"pulumi.com/waitFor {pulumi_await.wait_for_expressions(obj)}: the provider "
        f"ignores failures while it waits, so a graph that cannot become Ready holds `up` for "
        f"{pulumi_await.timeout_seconds(obj)} s with no reason; skip the await and wait in a Job that "
        "fails on a pod that cannot run (kimi_k3/pods/graph_watch.py)",
    )
