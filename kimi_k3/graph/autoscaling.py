"""Autoscaling by Dynamo's SLA planner (pure): bounds from the Capacity Block, the planner's config, its profiling
inputs from our performance model, and the Kubernetes objects that deploy it (kimi-k3:serving.autoscaling).

What the planner reads is Dynamo 1.6.1's (recipes/facts/autoscaling.yaml names each source): a PlannerConfig JSON
(`python3 -m dynamo.planner --config FILE`) and, in its profile_results_dir, `prefill_raw_data.json` (TTFT in ms by
ISL) and `decode_raw_data.json` (ITL in ms by KV-cache usage and context length, with the worker's KV tokens).

Who owns `replicas`: the planner, through the operator's DynamoGraphDeploymentScalingAdapter (`scalingAdapter: {}` on
each worker component). The graph this program renders then has no `replicas` on those components, so Pulumi never
holds the field: pulumi-kubernetes cannot ignore a field inside a list item on update (its server-side apply drops
only dotted map paths, pkg/await/await.go handleSSAIgnoreFields), so an `ignoreChanges` on
`spec.components[i].replicas` would still send the old count on the next change of anything else in the graph.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file

KEY = "kimi-k3:serving.autoscaling"


def facts() -> dict[str, Any]:
    return recipe_file("facts/autoscaling.yaml")


@dataclass(frozen=True)
class Autoscaling:
    """The resolved planner deployment of one stack."""

    mode: str  # disagg | agg (PlannerConfig.mode)
    min_replicas: tuple[tuple[str, int], ...]  # per role key
    max_replicas: tuple[tuple[str, int], ...]  # per role key: that role alone growing within the budget
    max_gpus: int  # PlannerConfig.max_gpu_budget
    budget_source: str
    scale_up_seconds: float  # weights load + warm-up of one more replica
    ttft_ms: float
    itl_ms: float
    interval_seconds: int
    image: str
    prometheus_endpoint: str
    config_json: str  # planner_config.json
    profile_files: tuple[tuple[str, str], ...]  # profile_results_dir file name -> JSON text
    block_scaledown_seconds: Optional[float] = (
        None  # eks Capacity Block: EKS empties the nodes this long before its end
    )

    def lines(self) -> list[str]:
        mins, maxs = dict(self.min_replicas), dict(self.max_replicas)
        out = [
            f"autoscaling {k}: {mins[k]}..{maxs[k]} replicas (Dynamo SLA planner; TTFT {self.ttft_ms:g} ms, "
            f"ITL {self.itl_ms:g} ms)"
            for k in mins
        ]
        up = self.scale_up_seconds / 60
        out.append(
            f"autoscaling GPU budget: {self.max_gpus} ({self.budget_source}); a scale-up serves ~{up:.0f} min "
            "after it starts (weights load + warm-up)"
        )
        if self.block_scaledown_seconds is not None:
            down = self.block_scaledown_seconds / 60
            out.append(
                f"autoscaling hours: EKS empties the node group {down:.0f} min before the Capacity Block ends, "
                f"so a scale-up started in its last ~{up + down:.0f} min never serves (the planner does not "
                "know the end: lower maxGpuBudget before then)"
            )
        return out


def _role_gpus(role) -> int:
    return role.tp


def _error(key: str, value: Any, problem: str, allowed: str) -> ConfigError:
    shown = "" if value is None else f" = {json.dumps(value)}"
    return ConfigError(f"{KEY}.{key}{shown}: {problem}; allowed: {allowed}")


def _budget(cfg: StackConfig, graph, plan) -> tuple[int, str]:
    """The GPUs the planner may use: configured, else the Capacity Block's; never more than the block holds, and
    never more than the GPU nodes that join the cluster."""
    a = cfg.serving.autoscaling
    gpn = graph.platform.gpus_per_node
    if cfg.cluster.mode != "eks":
        if a.max_gpu_budget is None:
            raise _error(
                "maxGpuBudget",
                None,
                f"required on a cluster this program does not build "
                f"(kimi-k3:cluster.mode {cfg.cluster.mode}): the planner needs a GPU ceiling",
                f"the GPUs of the {graph.platform.name} nodes this graph may use, e.g. {graph.gpus * 2}",
            )
        return a.max_gpu_budget, f"{KEY}.maxGpuBudget"
    from kimi_k3.aws.nodes import GPU_KEY

    block = plan.max_nodes * gpn
    what = f"{plan.max_nodes} {plan.instance.name} x {gpn} GPUs = {block}"
    if a.max_gpu_budget is not None and a.max_gpu_budget > block:
        raise _error(
            "maxGpuBudget",
            a.max_gpu_budget,
            f"more GPUs than the Capacity Block holds ({what}, {GPU_KEY}.reservationNodes)",
            f"1..{block}",
        )
    budget = a.max_gpu_budget or block
    joined = plan.desired_nodes * gpn
    if plan.desired_nodes and budget > joined:  # 0: the group is emptied on purpose (docs/aws.md)
        need = math.ceil(budget / gpn)
        raise ConfigError(
            f"{GPU_KEY}.desiredNodes = {plan.desired_nodes}: the planner may grow the graph to "
            f"{budget} GPUs ({KEY}.maxGpuBudget, default the Capacity Block's {block}) but only "
            f"{joined} GPUs join the cluster; allowed: "
            f"{need if need == plan.max_nodes else f'{need}..{plan.max_nodes}'} (the block is paid "
            f"whole either way), or a smaller {KEY}.maxGpuBudget of at most {joined}"
        )
    source = f"{KEY}.maxGpuBudget" if a.max_gpu_budget else f"the Capacity Block: {what}"
    return budget, source


def _prometheus(cfg: StackConfig) -> str:
    from kimi_k3.config.stack import stack_mode

    a = cfg.serving.autoscaling
    if a.prometheus_endpoint:
        return a.prometheus_endpoint
    mode = stack_mode(cfg)
    if mode != "install":
        raise _error(
            "prometheusEndpoint",
            None,
            f"required with kimi-k3:monitoring.stack {mode} (this program "
            "installs no Prometheus for the planner to query)",
            "the URL of the Prometheus that scrapes the frontend, e.g. http://prometheus.monitoring.svc:9090",
        )
    return facts()["prometheus_service"]


def resolve(cfg: StackConfig, graph) -> Optional[Autoscaling]:
    """The planner deployment for this stack, or None when autoscaling is off; ConfigError on bad input."""
    a = cfg.serving.autoscaling
    if not a.enabled:
        return None
    for key, value in (("ttftMs", a.ttft_ms), ("itlMs", a.itl_ms)):
        if value is None:
            raise _error(
                key,
                None,
                f"required when {KEY}.enabled is true (the planner sizes the graph to it)",
                "a target in milliseconds, e.g. " + ("30000" if key == "ttftMs" else "50"),
            )
    if cfg.serving.rollout.surge:
        raise ConfigError(
            f"kimi-k3:serving.rollout.surge = {cfg.serving.rollout.surge}: with {KEY}.enabled the "
            "planner owns the worker replicas, so a staged surge cannot add any; allowed: 0"
        )
    roles = {r.key: r for r in graph.roles}
    unknown = sorted(set(a.min_replicas) - set(roles))
    if unknown:
        raise _error(
            f"minReplicas.{unknown[0]}",
            a.min_replicas[unknown[0]],
            f"no such role in recipe {cfg.recipe}",
            ", ".join(sorted(roles)),
        )
    mode = "disagg" if {"prefill", "decode"} <= {r.type for r in graph.roles} else "agg"
    if mode == "agg" and len(graph.roles) != 1:
        raise ConfigError(
            f"{KEY}.enabled = true: the planner scales one aggregated worker role or one prefill and "
            f"one decode role; recipe {cfg.recipe} has {', '.join(roles)}; allowed: false"
        )
    from kimi_k3.aws.nodes import gpu_node_plan

    # eks mode: the GPU node group's plan, computed once for the budget and the Capacity Block's scale-down.
    plan = gpu_node_plan(cfg, graph.platform.name, graph.nodes) if cfg.cluster.mode == "eks" else None
    budget, source = _budget(cfg, graph, plan)
    gpn = graph.platform.gpus_per_node
    minimum = {k: a.min_replicas.get(k, r.replicas) for k, r in roles.items()}
    floor = sum(minimum[k] * _role_gpus(r) for k, r in roles.items())
    if floor > budget:
        parts = " + ".join(f"{k} {minimum[k]} x TP{r.tp}" for k, r in roles.items())
        raise _error(
            "minReplicas",
            minimum,
            f"the minimums take {parts} = {floor} GPUs, more than the planner's budget of {budget} ({source})",
            f"minimums within {budget} GPUs, each >= 1",
        )
    from kimi_k3.graph import durations, rollout

    est = durations.estimates(cfg, graph)
    bounds = rollout.scaling_bounds(
        graph, budget // gpn, gpn, est.load_seconds + est.of("worker_warmup"), minimum=minimum
    )
    f = facts()["planner"]
    image = a.image or f["image"]
    from kimi_k3.facts.images import pin_problem

    if pin_problem(image):
        raise _error("image", image, "not pinned", "an image with a version tag or digest, e.g. " + f["image"])
    from kimi_k3.facts.images import image_facts

    built = image_facts(image).arch
    if built is not None and not set(built) & set(graph.side_arch):
        raise _error(
            "image",
            image,
            f"built for {', '.join(sorted(built))} (recipes/facts/images.yaml), but the planner "
            f"runs beside the controllers on {', '.join(graph.side_arch)} nodes",
            f"an image built for {' or '.join(graph.side_arch)}",
        )
    prometheus = _prometheus(cfg)
    config = planner_config(graph, mode, minimum, budget, a.ttft_ms, a.itl_ms, a.adjustment_interval_seconds)
    profile = profile_files(graph, mode)
    return Autoscaling(
        mode=mode,
        min_replicas=tuple(sorted(minimum.items())),
        max_replicas=tuple(sorted(bounds.max_replicas.items())),
        max_gpus=budget,
        budget_source=source,
        scale_up_seconds=bounds.scale_up_seconds,
        ttft_ms=a.ttft_ms,
        itl_ms=a.itl_ms,
        interval_seconds=a.adjustment_interval_seconds,
        image=image,
        prometheus_endpoint=prometheus,
        config_json=_dump(config),
        profile_files=tuple(profile.items()),
        block_scaledown_seconds=(
            60.0 * facts()["capacity_block_scaledown_minutes"]
            if plan is not None and plan.capacity_type == "CAPACITY_BLOCK"
            else None
        ),
    )


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def planner_config(
    graph, mode: str, minimum: dict[str, int], budget: int, ttft_ms: float, itl_ms: float, interval: int
) -> dict[str, Any]:
    """PlannerConfig fields (dynamo/planner/config/planner_config.py, 1.6.1) for this graph."""
    f = facts()["planner"]
    by_type = {("prefill" if r.type == "prefill" else "decode"): r for r in graph.roles}
    out: dict[str, Any] = {
        "environment": "kubernetes",
        "backend": "vllm",
        "mode": mode,
        # SLA mode: throughput-based scaling to the TTFT/ITL targets from a performance model bootstrapped with the
        # profile files; "thorough" is the sweep mode whose data arrives as those files (dgd_generation.py).
        "optimization_target": "sla",
        "enable_throughput_scaling": True,
        "enable_load_scaling": False,
        "pre_deployment_sweeping_mode": "thorough",
        "profile_results_dir": f["profile_mount"],
        "ttft_ms": float(ttft_ms),
        "itl_ms": float(itl_ms),
        "throughput_adjustment_interval_seconds": interval,
        "max_gpu_budget": budget,
        "decode_engine_num_gpu": _role_gpus(by_type["decode"]),
        "model_name": graph.served_model_name,
        "live_dashboard_port": 0,  # no unauthenticated HTTP listener in the pod
    }
    if mode == "disagg":
        out["prefill_engine_num_gpu"] = _role_gpus(by_type["prefill"])
        out["prefill_min_endpoint"] = minimum[by_type["prefill"].key]
        out["decode_min_endpoint"] = minimum[by_type["decode"].key]
    else:
        out["min_endpoint"] = minimum[by_type["decode"].key]
    return out


def _r(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def profile_files(graph, mode: str) -> dict[str, str]:
    """The planner's profile_results_dir from the calibrated performance model (kimi_k3/sizing/perf.py): the mocker tables
    the rehearsal uses, as the profiler's raw data (dynamo/profiler/utils/profile_prefill.py, profile_decode.py)."""
    from kimi_k3.graph import role_plans
    from kimi_k3.sizing import layout as perf_layout
    from kimi_k3.sizing import mocker

    f = facts()
    by_type = {("prefill" if r.type == "prefill" else "decode"): r for r in graph.roles}
    decode = by_type["decode"]
    prefill = by_type.get("prefill", decode)
    layout = perf_layout.Layout.from_roles(
        perf_layout.RoleLayout(
            r.key, "prefill" if r.type == "prefill" else "decode", graph.platform.name, r.tp, r.replicas
        )
        for r in graph.roles
    )
    max_kv = role_plans.role_kv_plans(graph)[decode.key].single_request_tokens
    try:
        table = mocker.mocker_profile(
            layout,
            resolution=f["profile_resolution"],
            max_active_kv_tokens=max_kv,
            max_num_seqs=graph.decode_max_num_seqs,
        )
    except perf_layout.PerfError as exc:
        raise ConfigError(
            f"{KEY}.enabled = true: the performance model has no numbers for this layout ({exc}); "
            "the planner's profile data comes from it; allowed: false, or a layout kimi-k3 plan "
            "can estimate"
        ) from None
    isl = [round(x) for x in table["prefill_isl"]]
    ttft = [_r(t) for t in table["prefill_ttft_ms"]]
    pre = {
        "prefill_isl": isl,
        "prefill_ttft": ttft,
        "prefill_thpt_per_gpu": [_r(i / t * 1000 / prefill.tp) for i, t in zip(isl, ttft)],
    }
    x, y, z, thpt = [], [], [], []
    for kv, row in zip(table["decode_active_kv_tokens"], table["decode_itl"]):
        for ctx, itl in zip(table["decode_context_length"], row):
            batch = kv / ctx
            # less than one request, or more than a decode worker runs at once (its --max-num-seqs)
            if batch < 1 or (graph.decode_max_num_seqs is not None and batch > graph.decode_max_num_seqs):
                continue
            x.append(_r(kv / max_kv))
            y.append(_r(ctx))
            z.append(_r(itl))
            thpt.append(_r(batch / itl * 1000 / decode.tp))
    dec = {"x_kv_usage": x, "y_context_length": y, "z_itl": z, "z_thpt_per_gpu": thpt, "max_kv_tokens": int(max_kv)}
    names = f["planner"]
    files = {names["decode_file"]: _dump(dec)}
    if mode == "disagg":
        files[names["prefill_file"]] = _dump(pre)
    return dict(sorted(files.items()))


# ------------------------------------------------------------------------------------------ Kubernetes objects
