"""`kimi-k3 plan`: memory, cold-start and cost table (or --json, --plot) for a stack or an ad hoc role."""

# The command shell (this docstring is its --help): arguments, the stack resolved once (kimi_k3.blueprint), the ad
# hoc role, then the output modules plan_text, plan_json, plan_plots and plan_sla over plan_perf's figures.
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from kimi_k3.atomic import write_with
from kimi_k3.blueprint import Blueprint, rebudget
from kimi_k3.commands import plan_args, plan_json, plan_perf, plan_plots, plan_sla, plan_text
from kimi_k3.commands.argtypes import context_tokens, fraction, model_context, nonempty, positive, whole, year_month
from kimi_k3.commands.plan_text import TERMS, render_table
from kimi_k3.config.stack_files import StackError, stack_name_problem
from kimi_k3.errors import UserError
from kimi_k3.facts import model
from kimi_k3.facts import platforms as facts_platforms
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import memory


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "plan", description=__doc__, epilog=TERMS, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("stack", nargs="?", help="stack name (reads its serving graph); omit with --gpu/--tp")
    p.add_argument("--gpu", help="ad hoc role: platform key from recipes/facts/platforms.yaml")
    p.add_argument("--tp", type=whole(1), help="ad hoc role: tensor-parallel size")
    p.add_argument("--dcp", type=whole(1), default=1, help="decode context parallel size (splits MLA KV tokens)")
    p.add_argument(
        "--gpu-memory-utilization", type=fraction, default=0.9, help="share of GPU memory vLLM may use, (0, 1]"
    )
    p.add_argument("--kv-cache-dtype", choices=("fp8", "bf16"), default="fp8")
    p.add_argument("--spec-tokens", type=whole(0), default=0, help="speculative tokens per step")
    p.add_argument(
        "--prefix-caching",
        action="store_true",
        help="ad hoc role: the worker runs --enable-prefix-caching (vLLM keeps KDA state in 'align' mode)",
    )
    p.add_argument(
        "--max-model-len",
        type=context_tokens,
        default=1048576,
        help="context per request vLLM is started with (1 to the model's 1,048,576)",
    )
    p.add_argument("--kv-budget-gib", type=positive, help="use this KV pool per GPU instead of the computed one")
    p.add_argument("--replicas", type=whole(1), default=1, help="ad hoc role: worker replicas")
    p.add_argument("--instance-hour-usd", type=positive, help="price of one instance-hour (needs --price-source)")
    p.add_argument("--price-source", type=nonempty, help="where --instance-hour-usd comes from")
    p.add_argument("--price-as-of", type=year_month, help="date of that price, YYYY-MM[-DD]")
    p.add_argument("--output-tokens-per-second", type=positive, help="stack output throughput for $/Mtok")
    p.add_argument("--json", action="store_true", help="print JSON with stable keys")
    p.add_argument("--plot", metavar="FILE.png", help="draw capacity and cost vs context length per role")
    p.add_argument(
        "--trace",
        metavar="FILE",
        help="a mooncake_trace JSONL file (kimi-k3 rehearse --trace): print its "
        "uncached input, output and arrival rate, and the prefill:decode workers it needs on STACK",
    )
    plan_args.add_arguments(p)
    p.set_defaults(func=run)
    return p


PLOT_FORMATS = (".png", ".svg", ".pdf")
# Flags of the ad hoc role (their defaults): with a STACK they would be silently ignored.
AD_HOC_ONLY = {
    "tp": None,
    "dcp": 1,
    "gpu_memory_utilization": 0.9,
    "kv_cache_dtype": "fp8",
    "spec_tokens": 0,
    "prefix_caching": False,
    "max_model_len": 1048576,
    "replicas": 1,
    "instance_hour_usd": None,
    "price_source": None,
    "price_as_of": None,
}


def wrote(path: str) -> None:
    """Where a file went, on stderr (stdout may be --json or sent to /dev/null, as `make pareto` does)."""
    print(f"kimi-k3 plan: wrote {Path(path).resolve()}", file=sys.stderr)


def check_plot_path(path: str, flag: str = "--plot") -> None:
    """--plot FILE: a supported image type in a directory that exists and can be written (checked up front)."""
    check_output_path(path, flag, PLOT_FORMATS)


def check_output_path(path: str, flag: str, formats: tuple[str, ...]) -> None:
    target = Path(path)
    if target.suffix.lower() not in formats:
        raise UserError(
            f"{flag} {path}: unsupported file type {target.suffix or '(none)'!r}; allowed: a file name "
            f"ending in {', '.join(formats)}, e.g. plan{formats[0]}"
        )
    parent = target.parent
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: directory {parent} does not exist; create it first or choose another path")
    if (
        target.is_dir()
        or not os.access(parent, os.W_OK | os.X_OK)
        or (target.exists() and not os.access(target, os.W_OK))
    ):
        raise UserError(f"{flag} {path}: cannot be written here")


def _pricing(args: argparse.Namespace, platform: facts_platforms.Platform) -> planner.Pricing | None:
    if args.instance_hour_usd is None:
        return None
    if not args.price_source or not args.price_as_of:
        raise ValueError("--instance-hour-usd needs --price-source and --price-as-of")
    return planner.Pricing(
        instance_hour_usd=args.instance_hour_usd,
        gpus_per_instance=platform.gpus_per_node,
        source=args.price_source,
        as_of=args.price_as_of,
    )


def _adhoc(args: argparse.Namespace) -> tuple[planner.StackPlan, str]:
    platforms = facts_platforms.load_platforms()
    if args.gpu not in platforms:
        raise UserError(
            f"--gpu {args.gpu!r}: unknown platform; allowed: {', '.join(sorted(platforms))} (recipes/facts/platforms.yaml)"
        )
    platform = platforms[args.gpu]
    facts = model.load_model_facts()
    gpn = platform.gpus_per_node
    # A TP group fills whole nodes within one NVLink domain and divides the heads.
    allowed = [
        tp
        for tp in range(1, platform.nvlink_domain_nodes * gpn + 1)
        if tp % gpn == 0 and facts.mla_heads % tp == 0 and facts.kda_heads % tp == 0
    ]
    if args.tp not in allowed:
        raise UserError(
            f"--tp {args.tp}: not a TP Kimi K3 can use on {args.gpu} (whole {gpn}-GPU nodes within one "
            f"NVLink domain of {platform.nvlink_domain_nodes} nodes, dividing the {facts.mla_heads} "
            f"heads); allowed: {', '.join(map(str, allowed))}"
        )
    if args.dcp > args.tp or args.tp % args.dcp:
        raise UserError(f"--dcp {args.dcp}: must divide --tp {args.tp}")
    nodes = max(1, -(-args.tp // gpn))
    role = memory.RoleSpec(
        name="worker",
        gpu=args.gpu,
        tp=args.tp,
        nodes_per_replica=nodes,
        replicas=args.replicas,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_dtype=args.kv_cache_dtype,
        max_model_len=args.max_model_len,
        spec_tokens=args.spec_tokens,
        dcp=args.dcp,
        prefix_caching=args.prefix_caching,
    )
    stack = planner.plan_stack([role], _pricing(args, platform), output_tokens_per_second=args.output_tokens_per_second)
    if args.kv_budget_gib is not None:
        stack = rebudget(stack, args.kv_budget_gib)
    return stack, f"ad hoc {args.gpu} TP{args.tp}"


def _stack(args: argparse.Namespace, bp: Blueprint) -> tuple[planner.StackPlan, str]:
    """The stack's own plan, with --output-tokens-per-second and --kv-budget-gib applied."""
    stack = bp.plan
    if args.output_tokens_per_second is not None:
        stack = replace(stack, output_tokens_per_second=args.output_tokens_per_second)
    if args.kv_budget_gib is not None:
        stack = rebudget(stack, args.kv_budget_gib)
    return stack, f"stack {bp.stack}"


TRACE_MAX_BYTES = 256 << 20  # read whole; the FAST'25 hour is 3 MB


def plan_trace(args: argparse.Namespace) -> int:
    """`plan STACK --trace FILE`: the P:D ratio the trace needs at the stack's TPs (kimi_k3/sizing/trace_plan.py)."""
    from kimi_k3.sizing import perf, trace_cache, trace_plan

    if not args.stack:
        raise UserError(f"--trace {args.trace}: give the STACK whose layout it sizes (kimi-k3 plan STACK --trace FILE)")
    try:
        bp = Blueprint.for_stack(args.stack)
        lines = trace_cache.read_lines(args.trace, "--trace", TRACE_MAX_BYTES)
        _, requests = trace_cache.select(lines, f"--trace {args.trace}", limit=10**7)
        layout = plan_perf.layout_of(bp.plan)
        r = trace_plan.pd_ratio(
            requests,
            gpu=layout.gpu,
            prefill_tp=layout.prefill_tp or layout.tp,
            decode_tp=layout.tp,
            block_size=bp.graph.block_size,
            max_num_seqs=bp.graph.decode_max_num_seqs,
            prefill_token_budget=bp.graph.prefill_token_budget,
        )
    except (trace_cache.TraceError, perf.PerfError, StackError) as e:
        print(f"kimi-k3 plan {args.stack}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2) if args.json else trace_plan.render(r, args.trace, args.stack, layout.mode).rstrip())
    return 0


def _bounds(bp: Blueprint):
    """Replica bounds for an autoscaler, from the Capacity Block (kimi_k3/graph/rollout.py)."""
    from kimi_k3.graph import rollout

    if bp.autoscaling is not None:  # kimi-k3:serving.autoscaling: the planner's own bounds (graph/autoscaling.py)
        return bp.autoscaling
    est = bp.durations
    return rollout.scaling_bounds(
        bp.graph, bp.reservation_nodes, bp.graph.platform.gpus_per_node, est.load_seconds + est.of("worker_warmup")
    )


def _rollout(bp: Blueprint):
    """What a rollout needs (kimi_k3/graph/rollout.py): gaps, surge nodes vs the Capacity Block, duration."""
    from kimi_k3.graph import rollout

    est = bp.durations
    return rollout.plan(
        bp.graph, bp.config.serving.rollout.surge, bp.reservation_nodes, est.load_seconds + est.of("worker_warmup")
    )


def run(args: argparse.Namespace) -> int:
    for flag, image in (
        ("--plot", args.plot),
        ("--pareto", getattr(args, "pareto", None)),
        ("--cost-plot", getattr(args, "cost_plot", None)),
    ):  # before any work
        if image:
            check_plot_path(image, flag)
    if args.mocker_profile:
        check_output_path(args.mocker_profile, "--mocker-profile", (".npz",))
    if args.stack and stack_name_problem(args.stack):
        raise UserError(stack_name_problem(args.stack))
    if args.stack:  # the ad hoc role's flags would be ignored with a STACK: say so instead
        for name, default in AD_HOC_ONLY.items():
            if getattr(args, name) != default:
                flag = "--" + name.replace("_", "-")
                raise UserError(
                    f"{flag} {getattr(args, name)}: for an ad hoc role (--gpu/--tp) only; a STACK's roles "
                    f"and price come from Pulumi.{args.stack}.yaml (or drop STACK and give --gpu and --tp)"
                )
    if args.isl + args.osl > model_context():
        raise UserError(
            f"--isl {args.isl:,} + --osl {args.osl:,} = {args.isl + args.osl:,} tokens: longer than "
            f"Kimi K3's context; allowed: ISL + OSL <= {model_context():,}"
        )
    if args.trace:
        return plan_trace(args)
    bp = None  # the stack, resolved once: every figure below reads it
    try:
        if args.sla:
            if args.stack or args.gpu:
                raise ValueError("--sla searches every layout on GB200 and GB300: give it without STACK/--gpu")
            return plan_sla.run_sla(args)
        workload = plan_args.workload(args)
        if args.stack and args.gpu:
            raise ValueError("give either STACK or --gpu/--tp, not both")
        if args.stack:
            bp = Blueprint.for_stack(args.stack)
            stack, title = _stack(args, bp)
        elif args.gpu and args.tp:
            if getattr(args, "speculation", None) == "dspark" and not args.spec_tokens:
                args.spec_tokens = 7  # the vLLM launch post's DSpark recipe; the memory plan counts them too
            stack, title = _adhoc(args)
        else:
            raise ValueError("give a STACK, or --gpu and --tp for an ad hoc role")
        spec = plan_args.speculation(args, bp.graph if bp else None, args.spec_tokens)
        price = plan_args.api_price(args)
    except (ValueError, KeyError, StackError) as e:
        print(f"kimi-k3 plan: {e}", file=sys.stderr)
        return 2
    rollout = _rollout(bp) if bp else None
    est, perf_error = plan_perf.performance(stack, workload, spec)
    if est is not None and args.output_tokens_per_second is None:  # $/Mtok from the calibrated model
        stack = replace(stack, output_tokens_per_second=round(est.stack_tokens_per_second(), 2))
    if args.json:
        out = stack.to_json()
        for name, keys in plan_json.role_json(stack, est).items():
            out["roles"][name].update(keys)
        out["performance"] = plan_json.to_json(stack, est, perf_error, workload, price)
        if rollout is not None:
            out["rollout"] = {
                "surge": rollout.surge,
                "graph_nodes": rollout.graph_nodes,
                "surge_nodes": rollout.surge_nodes,
                "reservation_nodes": rollout.reservation_nodes,
                "surge_fits": rollout.surge_fits,
                "rollout_seconds": round(rollout.rollout_seconds),
                "roles_with_gap": [r.role for r in rollout.roles if r.gap],
            }
        print(json.dumps(out, indent=2))
    else:
        print(render_table(stack, title))
        rows = [
            row
            for r in stack.roles
            for row in [(f"[{r.spec.name}] performance", "")] + plan_text.role_rows(r.spec.name, est, perf_error)
        ]
        rows += plan_text.stack_rows(stack, est, perf_error, workload, price)
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k.ljust(width)}  {v}".rstrip() for k, v in rows))
        if rollout is not None:
            print("\n".join(rollout.lines() + _bounds(bp).lines()))
        print("\n" + TERMS)
    if args.plot:
        try:
            write_with(args.plot, lambda tmp: plan_plots.plot(stack, tmp, title))
        except OSError as exc:
            raise UserError(f"--plot {args.plot}: cannot be written ({exc.strerror or exc})") from None
        wrote(args.plot)
    try:
        if args.pareto:
            write_with(args.pareto, lambda tmp: plan_plots.pareto_plot(stack, title, tmp, workload))
            wrote(args.pareto)
        if args.mocker_profile:
            seqs = bp.graph.decode_max_num_seqs if bp else plan_perf.recipe_max_num_seqs(args.gpu)
            write_with(args.mocker_profile, lambda tmp: plan_perf.write_mocker_profile(stack, workload, tmp, seqs))
            wrote(args.mocker_profile)
        if args.cost_plot:
            if est is None:
                raise ValueError(f"--cost-plot: no performance figures for this stack ({perf_error})")
            write_with(args.cost_plot, lambda tmp: plan_plots.cost_plot(stack, est, title, tmp, workload, price))
            wrote(args.cost_plot)
    except OSError as exc:
        raise UserError(
            f"{args.pareto or args.mocker_profile or args.cost_plot}: cannot be written ({exc.strerror or exc})"
        ) from None
    except ValueError as e:  # perf.PerfError: a layout or workload the model cannot answer
        print(f"kimi-k3 plan: {e}", file=sys.stderr)
        return 2
    return 0
