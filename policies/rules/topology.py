"""Topology: TP groups, nodes, NVLink cliques and domains, GPU totals, memory fit."""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from kimi_k3 import flags
from kimi_k3.sizing.memory import memory_fit
from policies.rules.autoscaling import planner_owned
from policies.rules.base import (
    CLIQUE_LABEL,
    GPUS_ANNOTATION,
    Context,
    Finding,
    Result,
    Skipped,
    _int_flag,
    _is,
    components,
    gpu_product,
    gpus,
    main_container,
    name_of,
    node_count,
    platform_for_product,
    pod_spec,
    replicas,
    serving,
    shown,
    target_of,
    workers,
)
from policies.rules.gke_pool import gke_gpu_pool
from policies.rules.provided_domain import provided_channel_templates


def check_tp_spans_whole_nodes(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        tp = _int_flag(tokens, "--tensor-parallel-size", 1)
        pp = _int_flag(tokens, "--pipeline-parallel-size", 1)
        per_pod, nodes = gpus(container), node_count(comp)
        if tp * pp != nodes * per_pod:
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: TP {tp} x PP {pp} = {tp * pp} GPUs, "
                f"but {nodes} node(s) x {per_pod} GPUs per pod = {nodes * per_pod}",
            )


def check_pods_take_whole_nodes(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, _ in workers(obj):
        if node_count(comp) < 2:
            continue
        product = gpu_product(pod_spec(comp))
        found = platform_for_product(product)
        if found is None:
            yield Skipped(
                target_of(obj),
                f"component {name_of(comp)}: GPU product {shown(product)} not in "
                "recipes/facts/platforms.yaml (pin it with nodeSelector/nodeAffinity on nvidia.com/gpu.product)",
            )
            continue
        if gpus(container) != found.gpus_per_node:
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: multinode pod requests {gpus(container)} "
                f"GPUs; a {found.name} node has {found.gpus_per_node}",
            )


def tp_group_nodes(comp: Mapping) -> int:
    """Nodes one TP group of `comp` spans: its nodes over its vLLM pipeline stages (each stage is one TP group)."""
    tokens, _ = serving(main_container(comp))
    return max(1, node_count(comp) // max(1, _int_flag(tokens, "--pipeline-parallel-size", 1)))


def check_multinode_claims_compute_domain(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    templates = {
        ((o.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate", {}).get("name")
        for o in objects
        if _is(o, "ComputeDomain")
    } | provided_channel_templates(objects)  # a provider's, read from the cluster at `up`
    for obj in objects:
        for comp in components(obj):
            if tp_group_nodes(comp) < 2:  # TP inside one node (PP stages across nodes): no NVLink across them
                continue
            where = f"component {name_of(comp)}"
            spec, container = pod_spec(comp), main_container(comp) or {}
            claims = {c.get("name"): c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or []}
            used = [c.get("name") for c in (container.get("resources") or {}).get("claims") or []]
            channel = [n for n in used if claims.get(n) in templates]
            if not channel:
                yield Finding(
                    target_of(obj),
                    f"{where}: container main claims {sorted(used)} and the pod's "
                    f"resourceClaims map to {sorted(filter(None, claims.values()))}; none is a ComputeDomain "
                    f"channel template (known: {sorted(filter(None, templates))})",
                )
            for name in used:
                if name not in claims:
                    yield Finding(target_of(obj), f"{where}: container claim {name!r} has no pod resourceClaims entry")


def check_tp_group_pinned_to_clique(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        if tp_group_nodes(comp) < 2:
            continue
        affinity = (pod_spec(comp).get("affinity") or {}).get("podAffinity") or {}
        terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        if not any(t.get("topologyKey") == CLIQUE_LABEL for t in terms):
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: {tp_group_nodes(comp)}-node TP group has no "
                f"required podAffinity on {CLIQUE_LABEL}; its pods may land in different NVLink domains",
            )


def check_tp_group_fits_nvlink_domain(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        if node_count(comp) < 2:
            continue
        product = gpu_product(pod_spec(comp))
        found = platform_for_product(product)
        if found is None:
            yield Skipped(target_of(obj), f"component {name_of(comp)}: GPU product {shown(product)} unknown")
            continue
        if tp_group_nodes(comp) > found.nvlink_domain_nodes:
            yield Finding(
                target_of(obj),
                f"component {name_of(comp)}: {tp_group_nodes(comp)} nodes per TP group; "
                f"one {found.name} NVLink domain holds {found.nvlink_domain_nodes}",
            )


def gpu_nodes(obj: Mapping) -> int:
    return sum(replicas(c) * node_count(c) for c in components(obj) if gpus(main_container(c)) > 0)


def check_graph_fits_node_pool(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    """Pool size: policy config, else the GPU node groups the same stack creates."""
    pool, source = ctx.config.get("gpu_node_pool_nodes"), "policy config gpu_node_pool_nodes"
    gke = [gke_gpu_pool(r.type, r.aws_inputs or {})[0] for r in ctx.resources or []]  # a GKE GPU pool: fixed size
    groups = [r.gpu_pool_nodes for r in ctx.resources or [] if r.gpu_pool_nodes is not None] + [n for n in gke if n]
    if pool is None and groups:
        pool, source = sum(groups), "the stack's GPU node group max size"
    for obj in objects:
        if not components(obj):
            continue
        if pool is None:
            yield Skipped(
                target_of(obj),
                "GPU node pool size unknown (policy config gpu_node_pool_nodes, or a GPU node group in the same stack)",
            )
        elif gpu_nodes(obj) > int(pool):
            yield Finding(target_of(obj), f"graph needs {gpu_nodes(obj)} GPU nodes; the pool has {pool} ({source})")


def check_gpu_totals_match_recipe(obj: Mapping, ctx: Context) -> Iterator[Result]:
    expected = ((obj.get("metadata") or {}).get("annotations") or {}).get(GPUS_ANNOTATION)
    if not components(obj):
        return
    if expected is None:
        yield Skipped(target_of(obj), f"no {GPUS_ANNOTATION} annotation: no recipe total to compare with")
        return
    owned = [name_of(c) for c in components(obj) if planner_owned(c)]
    if owned:
        yield Skipped(
            target_of(obj),
            f"replicas of {', '.join(owned)} are the planner's (scaling adapter): the "
            "total moves within its GPU budget (kimi_k3/graph/autoscaling.py checks the budget against the block)",
        )
        return
    total = sum(replicas(c) * node_count(c) * gpus(main_container(c)) for c in components(obj))
    if total != int(expected):
        yield Finding(
            target_of(obj),
            f"components request {total} GPUs (replicas x nodes x GPUs per pod); the recipe computed {expected}",
        )


# vLLM --kv-cache-dtype values -> the planner's dtype names ("auto" is the checkpoint's bf16).
_KV_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def check_model_fits_at_tp(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        where = f"component {name_of(comp)}"
        found = platform_for_product(gpu_product(pod_spec(comp)))
        if found is None:
            yield Skipped(target_of(obj), f"{where}: GPU product unknown")
            continue
        tp = _int_flag(tokens, "--tensor-parallel-size", 1)
        kwargs: dict[str, Any] = {
            "dcp": _int_flag(tokens, "--decode-context-parallel-size", 1),
            "pp": _int_flag(tokens, "--pipeline-parallel-size", 1),
            "kv_cache_dtype": _KV_DTYPES.get(flags.flag_value(tokens, "--kv-cache-dtype") or "auto", "bf16"),
        }
        if flags.flag_value(tokens, "--gpu-memory-utilization"):
            kwargs["gpu_memory_utilization"] = float(flags.flag_value(tokens, "--gpu-memory-utilization"))
        if flags.flag_value(tokens, "--max-model-len"):
            kwargs["max_model_len"] = int(flags.flag_value(tokens, "--max-model-len"))
        try:
            fits, reason = memory_fit(found.name, tp, **kwargs)
        except ValueError as exc:  # the planner rejects layouts the model cannot run in (e.g. TP not dividing heads)
            fits, reason = False, str(exc)
        if not fits:
            yield Finding(target_of(obj), f"{where}: {reason}")
