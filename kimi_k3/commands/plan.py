"""`kimi-k3 plan`: memory, cold-start and cost table (or --json, --plot) for a stack or an ad hoc role."""

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
from kimi_k3.commands import plan_perf
from kimi_k3.commands.argtypes import context_tokens, fraction, model_context, nonempty, positive, whole, year_month
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
    p.add_argument("--gpu", help="ad hoc role: platform key from recipes/platforms.yaml")
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
    plan_perf.add_arguments(p)
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
            f"--gpu {args.gpu!r}: unknown platform; allowed: {', '.join(sorted(platforms))} (recipes/platforms.yaml)"
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


def render_table(stack: planner.StackPlan, title: str) -> str:
    rows: list[tuple[str, ...]] = []
    for r in stack.roles:
        p, j = r.plan, r.plan.to_json()
        rows += [
            (
                f"[{r.spec.name}]",
                f"{p.gpu} TP{p.tp} DCP{p.dcp} x{r.spec.replicas}, util {p.gpu_memory_utilization}, "
                f"KV {p.kv_cache_dtype}, spec {p.spec_tokens}, prefix caching "
                f"{'on' if p.prefix_caching else 'off'}, block {p.block_size}",
            ),
            ("weights per GPU", f"{j['weights_gb_per_gpu'] * 1e9 / 2**30:.1f} GiB"),  # one unit: GiB
            ("activation reserve", f"{j['activation_reserve_gib']:.1f} GiB"),
            ("KV pool per GPU", f"{j['kv_pool_gib_per_gpu']:.2f} GiB"),
            ("MLA KV per token per GPU", f"{j['kv_bytes_per_token']:,.0f} B"),
            ("KDA state per request per GPU", f"{j['state_mib_per_request_per_gpu']:.1f} MiB"),
            (
                "KV cache size, vLLM's log line",
                f"{j['kv_capacity_tokens']:,} tokens (requests at max-model-len that fit x max-model-len: see terms)",
            ),
            ("longest one request can be", f"{j['kv_capacity_tokens_single_request']:,} tokens"),
            ("requests at once, per replica", "each request of:"),
            *[(f"  {int(c):,} tokens", str(n)) for c, n in j["max_concurrent_requests"].items()],
            (
                f"fits {p.max_model_len:,} tokens",
                f"{'yes' if p.fits else 'NO'} (margin {p.fit_margin_gib:+.1f} GiB; one request, prompt + output)",
            ),
            *[(f"  cold start via {b}", f"{s / 60:.1f} min") for b, s in j["load_seconds"].items()],
        ]
    cost = stack.cost_per_hour_usd
    per_mtok = stack.usd_per_million_output_tokens
    rows += [
        ("[stack]", f"{stack.gpus} GPUs on {stack.nodes} nodes = {stack.gpu_hours_per_hour} GPU-hours per hour"),
        (
            "cost per hour",
            "no price configured" if cost is None else f"${cost:,.2f} ({stack.pricing.source}, {stack.pricing.as_of})",
        ),
        *(
            [
                (
                    "  billed as",
                    f"one Capacity Block of {stack.pricing.billed_instances} instances; the stack's "
                    f"{stack.nodes} cost ${stack.used_cost_per_hour_usd:,.2f}",
                )
            ]
            if cost is not None and stack.pricing.billed_instances
            else []
        ),
        (
            "$ per million output tokens",
            (
                f"${per_mtok:,.4f} ("
                + ("the Capacity Block billed whole" if stack.pricing.billed_instances else "the GPUs used")
                + ")"
            )
            if per_mtok is not None
            else ("no price configured" if cost is None else "give --output-tokens-per-second"),
        ),
        *(
            [("  only the GPUs used", f"${stack.used_usd_per_million_output_tokens:,.4f} (what `plan --sla` counts)")]
            if per_mtok is not None and stack.pricing.billed_instances
            else []
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"Kimi K3 plan: {title}", *(f"{k.ljust(width)}  {v}" for k, v in rows)])


TERMS = """\
terms:
  KV pool per GPU                 GPU memory left for the KV cache and KDA state after weights and the reserve.
  KV cache size, vLLM's log line  vLLM's startup line 'GPU KV cache size: N tokens': its maximum concurrency at
                                  max-model-len times max-model-len (each request also holds its KDA state blocks,
                                  so it is a little below the longest single request). With DCP it counts the
                                  tokens of all DCP ranks together.
  longest one request can be      the context one request alone could reach with the whole pool.
  requests at once                vLLM's 'Maximum concurrency for N tokens per request': how many requests of that
                                  full context fit together in one replica (each also holds its KDA state). So
                                  '3 at 1,048,576' and a log line below 1M tokens do not contradict each other.
  fits                            weights + reserve + one request at the full context fit in GPU memory."""


def plan_figure(stack: planner.StackPlan, title: str):
    """The capacity and cost-per-slot figure: titled with the stack, one line per distinct curve (roles that
    draw the same curve share it and its label), the legend below both axes so it never covers data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contexts = list(model.CONTEXTS)
    fig, (cap, cost) = plt.subplots(1, 2, figsize=(12, 5.6))
    # Roles with the same topology draw identical curves: one line, labelled with every role it stands for.
    curves: dict[tuple, list] = {}
    for r in stack.roles:
        counts = tuple(r.plan.vllm_max_concurrency(c) for c in contexts)
        slot_cost = None
        if stack.pricing is not None:
            role_hour = r.gpus * stack.pricing.instance_hour_usd / stack.pricing.gpus_per_instance
            slot_cost = tuple(role_hour / (n * r.spec.replicas) if n > 0 else float("nan") for n in counts)
        curves.setdefault((counts, slot_cost), []).append(r)
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]
    for i, ((counts, slot_cost), roles) in enumerate(curves.items()):
        line, marker = styles[i % len(styles)]
        p = roles[0].plan
        names = " = ".join(r.spec.name for r in roles)
        label = (
            f"{names}: {p.gpu} TP{p.tp}"
            + (f" DCP{p.dcp}" if p.dcp > 1 else "")
            + (" (same curve)" if len(roles) > 1 else "")
        )
        cap.plot(contexts, counts, linestyle=line, marker=marker, label=label)
        if slot_cost is not None:
            cost.plot(contexts, slot_cost, linestyle=line, marker=marker, label=label)
    for ax in (cap, cost):
        ax.set_xscale("log", base=2)
        ax.set_xlim(contexts[0] / 1.4, contexts[-1] * 1.4)
        ax.set_xticks(contexts, [f"{c // 2**20}M" if c >= 2**20 else f"{c // 1024}k" for c in contexts])
        ax.set_xlabel("context length per request (tokens)")
        ax.grid(True, which="both", alpha=0.3)
    cap.set_yscale("log")
    cap.set_ylabel("requests at once per replica (vLLM max concurrency)")
    cap.set_title("requests that fit together in one replica")
    cost.set_title("cost per request slot")
    if stack.pricing is None:
        cost.text(0.5, 0.5, "no price configured", ha="center", va="center", transform=cost.transAxes)
    else:
        cost.set_yscale("log")
        cost.set_ylabel("$ per slot-hour")
    handles, labels = cap.get_legend_handles_labels()
    fig.suptitle(f"Kimi K3 plan: {title}")
    rows = 1 + (len(labels) - 1) // 3
    fig.legend(
        handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.035), ncol=min(len(labels), 3), frameon=False
    )
    if stack.pricing is not None:
        fig.text(
            0.5,
            0.005,
            f"price: {stack.pricing.source} ({stack.pricing.as_of})",
            ha="center",
            va="bottom",
            fontsize="small",
            wrap=True,
        )
    fig.tight_layout(rect=(0, 0.07 + 0.045 * rows, 1, 0.95))
    return fig


def plot(stack: planner.StackPlan, path: str, title: str = "") -> None:
    import matplotlib.pyplot as plt

    fig = plan_figure(stack, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
            return plan_perf.run_sla(args)
        workload = plan_perf.workload(args)
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
        spec = plan_perf.speculation(args, bp.graph if bp else None, args.spec_tokens)
        price = plan_perf.api_price(args)
    except (ValueError, KeyError, StackError) as e:
        print(f"kimi-k3 plan: {e}", file=sys.stderr)
        return 2
    rollout = _rollout(bp) if bp else None
    est, perf_error = plan_perf.performance(stack, workload, spec)
    if est is not None and args.output_tokens_per_second is None:  # $/Mtok from the calibrated model
        stack = replace(stack, output_tokens_per_second=round(est.stack_tokens_per_second(), 2))
    if args.json:
        out = stack.to_json()
        for name, keys in plan_perf.role_json(stack, est).items():
            out["roles"][name].update(keys)
        out["performance"] = plan_perf.to_json(stack, est, perf_error, workload, price)
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
            for row in [(f"[{r.spec.name}] performance", "")] + plan_perf.role_rows(r.spec.name, est, perf_error)
        ]
        rows += plan_perf.stack_rows(stack, est, perf_error, workload, price)
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k.ljust(width)}  {v}".rstrip() for k, v in rows))
        if rollout is not None:
            print("\n".join(rollout.lines() + _bounds(bp).lines()))
        print("\n" + TERMS)
    if args.plot:
        try:
            write_with(args.plot, lambda tmp: plot(stack, tmp, title))
        except OSError as exc:
            raise UserError(f"--plot {args.plot}: cannot be written ({exc.strerror or exc})") from None
        wrote(args.plot)
    try:
        if args.pareto:
            write_with(args.pareto, lambda tmp: plan_perf.pareto_plot(stack, title, tmp, workload))
            wrote(args.pareto)
        if args.mocker_profile:
            seqs = bp.graph.decode_max_num_seqs if bp else plan_perf.recipe_max_num_seqs(args.gpu)
            write_with(args.mocker_profile, lambda tmp: plan_perf.write_mocker_profile(stack, workload, tmp, seqs))
            wrote(args.mocker_profile)
        if args.cost_plot:
            if est is None:
                raise ValueError(f"--cost-plot: no performance figures for this stack ({perf_error})")
            write_with(args.cost_plot, lambda tmp: plan_perf.cost_plot(stack, est, title, tmp, workload, price))
            wrote(args.cost_plot)
    except OSError as exc:
        raise UserError(
            f"{args.pareto or args.mocker_profile or args.cost_plot}: cannot be written ({exc.strerror or exc})"
        ) from None
    except ValueError as e:  # perf.PerfError: a layout or workload the model cannot answer
        print(f"kimi-k3 plan: {e}", file=sys.stderr)
        return 2
    return 0
