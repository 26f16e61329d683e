"""The performance figures `kimi-k3 plan` prints, from a stack's plan: its layout and speculation, the calibrated
estimate, the cost bases and the API comparison (over kimi_k3/sizing/perf.py). No argv, no wording: plan_args.py
reads the options, plan_text.py / plan_json.py / plan_plots.py / plan_sla.py present what this computes."""

from __future__ import annotations

import json
from typing import Any, Optional

from kimi_k3.blueprint import Blueprint
from kimi_k3.errors import UserError
from kimi_k3.facts import platforms
from kimi_k3.graph.model import ServingGraph
from kimi_k3.graph.recipe import load_recipe, merge
from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import mocker, perf

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")


def speculation_of(graph: ServingGraph, acceptance_length: Optional[float] = None) -> perf.Speculation:
    """The graph's decode workers' speculative decoding (Role.speculative_config, their --speculative-config)."""
    configs = [json.loads(r.speculative_config or "{}") for r in graph.roles if r.type != "prefill"]
    spec = next((c for c in configs if c), {})
    if not spec and acceptance_length is not None:
        raise ValueError(
            f"--acceptance-length: stack {graph.stack} runs no speculative decoding (no --speculative-config)"
        )
    return perf.speculation_from_config(spec, acceptance_length)


def stack_speculation(name: str, acceptance_length: Optional[float] = None) -> perf.Speculation:
    """speculation_of the stack NAME (for a caller that holds only its name)."""
    return speculation_of(Blueprint.for_stack(name).graph, acceptance_length)


def layout_of(stack: planner.StackPlan, speculation: perf.Speculation = perf.PLAIN) -> perf.Layout:
    staged = [r.spec for r in stack.roles if r.spec.pp > 1]
    if staged:  # refused, not approximated: a PP pipeline's speed is not a TP group's
        s = staged[0]
        raise perf.PerfError(
            f"role {s.name}: TP{s.tp} x PP{s.pp} on {s.gpu}: the performance model has no pipeline-parallel "
            f"layout (no aiconfigurator point in recipes/facts/perf-raw.yaml, no calibrated point in "
            f"recipes/facts/perf-measurements.yaml for PP or for {s.gpu}); no speed, cost per token or SLA is estimated"
        )
    return perf.Layout.from_roles(
        (
            perf.RoleLayout(
                r.spec.name, "prefill" if r.spec.name == "prefill" else "decode", r.spec.gpu, r.spec.tp, r.spec.replicas
            )
            for r in stack.roles
        ),
        speculation,
    )


def tool_status() -> str:
    ok, why = aic.available()
    if ok:
        return f"aiconfigurator {aic.VERSION} installed"
    return f"{why}; numbers come from the committed table recipes/facts/perf-raw.yaml"


def performance(
    stack: planner.StackPlan, w: perf.Workload, spec: perf.Speculation = perf.PLAIN
) -> tuple[Optional[perf.Estimate], Optional[str]]:
    try:
        util = min(r.spec.gpu_memory_utilization for r in stack.roles)
        return perf.estimate(layout_of(stack, spec), w, gpu_memory_utilization=util), None
    except perf.PerfError as e:
        return None, str(e)


def cost_bases(stack: planner.StackPlan) -> dict[str, float]:
    """$/hour per cost basis: the Capacity Block billed whole (where the stack runs in one), and the GPUs used."""
    if stack.pricing is None:
        return {}
    out = {}
    if stack.pricing.billed_instances:
        out["capacity_block_billed_whole"] = stack.cost_per_hour_usd
    out["gpus_used"] = stack.used_cost_per_hour_usd
    return out


BASIS_LABELS = {
    "capacity_block_billed_whole": "Capacity Block billed whole",
    "gpus_used": "only the GPUs the stack uses",
}


def cost_vs_api(
    stack: planner.StackPlan, est: Optional[perf.Estimate], w: perf.Workload, price: Optional[perf.ApiPrice]
) -> Optional[dict[str, Any]]:
    if est is None or price is None or stack.pricing is None:
        return None
    return perf.cost_vs_api(w, price, est.requests_per_second_capacity, cost_bases(stack), w.request_rate)


def at_context(est: perf.Estimate, isl: int, w0: perf.Workload, util: float) -> tuple[Optional[perf.Estimate], str]:
    """The layout at context `isl` with the requested load, or the most requests per worker that fit."""
    err = ""
    for batch in sorted((b for b in aic.BATCHES if b <= est.batch), reverse=True) or [1]:
        w = perf.Workload(isl, w0.osl, batch * est.layout.replicas, w0.request_rate, w0.cache_hit_rate)
        try:
            e = perf.estimate(est.layout, w, gpu_memory_utilization=util, live=False)
        except perf.PerfError as x:
            err = str(x)
            continue
        if e.kv_fits or batch == 1:
            return e, ""
    return None, err


def platform_prices() -> tuple[dict[str, float], dict[str, int], dict[perf.Layout, str], list[str]]:
    """$/GPU-hour per platform from the aggregated stacks' pricing, and our four stacks' layouts."""
    prices, gpn, ours, sources = {}, {}, {}, []
    for name in STACKS:
        stack = Blueprint.for_stack(name).plan  # the same plan `plan STACK` prints
        layout = layout_of(stack)
        ours[layout] = name
        gpn[layout.gpu] = platforms.load_platforms()[layout.gpu].gpus_per_node
        if stack.pricing is not None and layout.gpu not in prices:
            prices[layout.gpu] = perf.gpu_hour_usd(stack.pricing)
            sources.append(
                f"{layout.gpu}: ${prices[layout.gpu]:.3f}/GPU-hour ({stack.pricing.source}, {stack.pricing.as_of})"
            )
    return prices, gpn, ours, sources


def write_mocker_profile(
    stack: planner.StackPlan, w: perf.Workload, path: str, max_num_seqs: Optional[int] = None
) -> None:
    """`max_num_seqs`: the most requests a decode worker runs at once (its --max-num-seqs)."""
    profile = mocker.mocker_profile(layout_of(stack), w.osl, max_num_seqs=max_num_seqs)
    mocker.write_mocker_profile(profile, path)


def recipe_max_num_seqs(platform: str) -> Optional[int]:
    """An ad hoc role's --max-num-seqs: the decode workers' of the platform's own recipe (recipes/PLATFORM.yaml);
    None (no cap) for a platform no recipe runs."""
    try:
        recipe = load_recipe(platform)
    except UserError:
        return None
    seqs = [
        int(str(value))
        for r in recipe.roles.values()
        if r.type != "prefill"
        for value in [merge(recipe.worker.args, r.args).get("--max-num-seqs")]
        if value is not None and not isinstance(value, bool)
    ]
    return max(seqs) if seqs else None


def nearest_context(isl: int) -> int:
    return min(aic.CONTEXTS, key=lambda c: abs(c - isl))
