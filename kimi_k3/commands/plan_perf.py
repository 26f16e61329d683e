"""The performance part of `kimi-k3 plan`: latency/throughput/$-per-Mtok per role, curves, --sla, --pareto.

A thin shell over kimi_k3/sizing/perf.py (pure); kept apart from plan.py so its wording and layout can change freely.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from typing import Any, Optional

from kimi_k3.blueprint import Blueprint
from kimi_k3.commands.argtypes import context_tokens, model_context, positive, positive_int
from kimi_k3.errors import UserError
from kimi_k3.facts import platforms
from kimi_k3.graph.model import ServingGraph
from kimi_k3.graph.recipe import load_recipe, merge
from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import mocker, perf, sla

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("performance (aiconfigurator, calibrated to public measurements)")
    g.add_argument(
        "--isl",
        type=context_tokens,
        default=perf.DEFAULT_ISL,
        help=f"input tokens per request (default {perf.DEFAULT_ISL}: agentic turns carry long context)",
    )
    g.add_argument(
        "--osl",
        type=context_tokens,
        default=perf.DEFAULT_OSL,
        help=f"output tokens per request (default {perf.DEFAULT_OSL})",
    )
    g.add_argument(
        "--concurrency",
        type=positive_int,
        help="requests in flight per stack (default: "
        f"{perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER} per decoding worker)",
    )
    g.add_argument("--request-rate", type=positive, help="requests/s to sustain (--sla: replicate layouts to carry it)")
    g.add_argument(
        "--sla",
        metavar="ttft_ms=N,tpot_ms=N",
        help="rank the layouts on GB200 and GB300 that meet it, "
        "cheapest first, and print the stack config that deploys the best",
    )
    g.add_argument("--top", type=positive_int, default=10, help="--sla: how many layouts to list (default 10)")
    g.add_argument(
        "--cache-hit-rate",
        type=hit_rate,
        default=0.0,
        metavar="FRACTION",
        help="share of each request's input found in the prefix cache, [0, 1): skips that prefill "
        "compute and is billed at the API's cache-hit price (default 0)",
    )
    g.add_argument(
        "--speculation",
        choices=("none", "dspark"),
        help="--sla / --gpu: model the decode workers "
        "with this speculative decoding (a STACK's own --speculative-config decides for it; default none)",
    )
    g.add_argument(
        "--acceptance-length",
        type=acceptance,
        metavar="TOKENS",
        help="mean tokens a speculative "
        "step yields (default: the published figure, recipes/perf-measurements.yaml `speculation`)",
    )
    g.add_argument("--api-model", help="the API price to compare with (recipes/api-prices.yaml; default its `default`)")
    g.add_argument(
        "--api-price",
        metavar="KEY=USD,...",
        help=f"override the API's price per million tokens: {', '.join(perf.API_PRICE_KEYS)}",
    )
    g.add_argument(
        "--pareto",
        metavar="FILE.png",
        help="draw tokens/s per GPU against tokens/s per user for the "
        "stack across context lengths, over every layout on its platform",
    )
    g.add_argument(
        "--cost-plot",
        metavar="FILE.png",
        help="draw the stack's $ per million output tokens against "
        "load at each context length, with the API's price for the same requests (where they cross is "
        "the break-even load), on both cost bases",
    )
    g.add_argument(
        "--mocker-profile",
        metavar="FILE.npz",
        help="write the stack's calibrated timing as Dynamo "
        "mocker profile data (dynamo.mocker --planner-profile-data FILE.npz)",
    )


def _finite(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{flag} {text!r} is not a finite number")
    return value


def hit_rate(text: str) -> float:
    """argparse type: a share of the input, 0 <= x < 1 (a full hit would leave nothing to prefill)."""
    value = _finite(text, "--cache-hit-rate")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} is outside [0, 1); allowed: e.g. 0.9 for 90% of the input cached")
    return value


def acceptance(text: str) -> float:
    """argparse type: tokens per speculative step, >= 1 (1 = every draft rejected)."""
    value = _finite(text, "--acceptance-length")
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text} is below 1; allowed: a number >= 1 (tokens per target step, the bonus token included)"
        )
    return value


def api_price(args: argparse.Namespace) -> perf.ApiPrice:
    """The API price the comparison uses: recipes/api-prices.yaml's model, with --api-price overrides."""
    default, prices = perf.api_prices()
    name = args.api_model or default
    if name not in prices:
        raise ValueError(f"--api-model {name!r}: unknown; allowed: {', '.join(prices)} (recipes/api-prices.yaml)")
    price = prices[name]
    if not args.api_price:
        return price
    values = {}
    for part in args.api_price.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in perf.API_PRICE_KEYS:
            raise ValueError(
                f"--api-price {args.api_price!r}: {part!r} is not KEY=USD with KEY one of "
                f"{', '.join(perf.API_PRICE_KEYS)}"
            )
        try:
            values[key] = float(value)
        except ValueError:
            raise ValueError(f"--api-price {args.api_price!r}: {key} = {value!r} is not a number") from None
        if not math.isfinite(values[key]) or values[key] < 0:
            raise ValueError(f"--api-price {args.api_price!r}: {key} = {value!r}; allowed: a finite number >= 0")
    return replace(price, **values, source=f"{price.source} with --api-price {args.api_price}")


def parse_sla(text: str) -> tuple[float, float]:
    allowed = ("ttft_ms", "tpot_ms")
    values: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise ValueError(f"--sla {text!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(allowed)}")
        if key in values:
            raise ValueError(f"--sla {text!r}: {key} is given twice; allowed: each of {', '.join(allowed)} once")
        try:
            values[key] = float(value)
        except ValueError:
            raise ValueError(f"--sla {text!r}: {key} = {value!r} is not a number") from None
        if not values[key] > 0 or values[key] == float("inf"):  # nan and inf pass a `<= 0` check
            raise ValueError(f"--sla {text!r}: {key} = {value.strip()!r} must be > 0; allowed: a finite number > 0")
    missing = [k for k in allowed if k not in values]
    if missing:
        raise ValueError(f"--sla {text!r}: missing {', '.join(missing)} (give ttft_ms=...,tpot_ms=...)")
    return values["ttft_ms"], values["tpot_ms"]


def workload(args: argparse.Namespace) -> perf.Workload:
    for name in ("isl", "osl"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} {getattr(args, name)}: must be >= 1")
    if args.concurrency is not None and args.concurrency < 1:
        raise ValueError(f"--concurrency {args.concurrency}: must be >= 1")
    if args.request_rate is not None and args.request_rate <= 0:
        raise ValueError(f"--request-rate {args.request_rate}: must be > 0")
    if args.request_rate is not None and not math.isfinite(args.request_rate):
        raise ValueError(f"--request-rate {args.request_rate}: must be a finite number")
    return perf.Workload(
        args.isl, args.osl, args.concurrency, args.request_rate, getattr(args, "cache_hit_rate", 0.0) or 0.0
    )


def speculation(
    args: argparse.Namespace, graph: Optional[ServingGraph] = None, spec_tokens: int = 0
) -> perf.Speculation:
    """What the decode workers run: a stack's own --speculative-config, or --speculation (with --spec-tokens
    draft tokens, default 7 as in the vLLM launch post's DSpark recipe) for --sla and ad hoc layouts."""
    tau = getattr(args, "acceptance_length", None)
    if graph is not None:
        if getattr(args, "speculation", None):
            raise ValueError(
                f"--speculation: stack {graph.stack}'s speculative decoding is its workers' "
                "--speculative-config (none in ours: their image cannot run DSpark); drop the flag"
            )
        return speculation_of(graph, tau)
    method = getattr(args, "speculation", None) or "none"
    if method == "none":
        if tau is not None:
            raise ValueError("--acceptance-length needs a layout that speculates (--speculation dspark)")
        return perf.PLAIN
    try:
        return perf.speculation_from_config({"method": method, "num_speculative_tokens": spec_tokens or 7}, tau)
    except perf.PerfError as e:
        raise ValueError(f"--acceptance-length: {e}") from None


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
    return f"{why}; numbers come from the committed table recipes/perf-raw.yaml"


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


def calibration_json() -> dict[str, Any]:
    rows = perf.calibration_report()
    errors = perf.held_out_errors()
    return {
        "fitted": sorted({r["id"] for r in rows if r["use"] == "calibrate"}),
        "held_out": sorted({r["id"] for r in rows if r["use"] == "held_out"}),
        "held_out_mean_abs_error": {k: None if v is None else round(v, 4) for k, v in errors.items()},
        "parameters": {k: round(v, 4) for k, v in perf.calibration().fitted.items()},
    }


def to_json(
    stack: planner.StackPlan,
    est: Optional[perf.Estimate],
    error: Optional[str],
    w: perf.Workload,
    price: Optional[perf.ApiPrice] = None,
) -> dict[str, Any]:
    """The `performance` block of plan --json, and the per-role keys merged into `roles`."""
    if est is None:
        return {"error": error, "tool": tool_status()}
    cost = stack.cost_per_hour_usd
    layout = est.layout
    curves = perf.curves(
        layout,
        osl=w.osl,
        cost_per_hour=cost,
        gpu_memory_utilization=min(r.spec.gpu_memory_utilization for r in stack.roles),
    )
    memory = {r.spec.name: perf.memory_comparison(r.spec.gpu, r.spec.tp) for r in stack.roles}
    return {
        "workload": {
            "isl": w.isl,
            "osl": w.osl,
            "concurrency": est.concurrency,
            "batch_per_worker": est.batch,
            "request_rate": w.request_rate,
            "cache_hit_rate": w.cache_hit_rate,
        },
        "layout": layout.describe(),
        "speculation": layout.speculation.describe(),
        "speculation_speedup": round(est.speedup, 4),
        "source": est.source,
        "tool": tool_status(),
        "kv_fits": est.kv_fits,
        "kv_capacity_requests_per_worker": est.kv_capacity_per_worker,
        "output_tokens_per_second": round(est.stack_tokens_per_second(), 2),
        "raw_output_tokens_per_second": round(est.stack_tokens_per_second(False), 2),
        "ttft_ms": round(est.calibrated["ttft_ms"], 2),
        "tpot_ms": round(est.calibrated["tpot_ms"], 2),
        "prefill_queue": {
            "model": "M/D/1 per prefill server",
            "arrival_rate_requests_per_second": round(est.arrival_rate, 4),
            "utilization": round(est.prefill_utilization, 4),
            "service_ms": round(est.ttft_service_ms, 2),
            "wait_ms": round(est.prefill_wait_ms, 2),
        },
        "raw_usd_per_million_output_tokens": None
        if cost is None
        else round(perf.usd_per_million_output_tokens(cost, est.stack_tokens_per_second(False)), 4),
        "cost_vs_api": cost_vs_api(stack, est, w, price),
        "calibration": calibration_json(),
        "notes": list(est.notes),
        "curves": curves,
        "memory_vs_aiconfigurator": memory,
    }


def role_json(stack: planner.StackPlan, est: Optional[perf.Estimate]) -> dict[str, dict[str, Any]]:
    """ttft_ms / tpot_ms / tokens_per_second_per_gpu / tokens_per_second_per_user for every role (None if unknown)."""
    keys = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu", "tokens_per_second_per_user")
    out = {}
    cal = est.role_metrics(True) if est else {}
    raw = est.role_metrics(False) if est else {}
    for r in stack.roles:
        kind = "prefill" if r.spec.name == "prefill" else "decode"
        out[r.spec.name] = {
            **{k: cal.get(kind, {}).get(k) for k in keys},
            "raw_performance": {k: raw.get(kind, {}).get(k) for k in keys},
        }
    return out


def _fmt(x: Optional[float], unit: str = "", digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}{unit}"


def role_rows(name: str, est: Optional[perf.Estimate], error: Optional[str]) -> list[tuple[str, str]]:
    if est is None:
        return [("  performance", "unknown (see [performance] below)")]
    kind = "prefill" if name == "prefill" else "decode"
    c, r = est.role_metrics(True)[kind], est.role_metrics(False)[kind]
    rows = []
    for key, label, unit in (
        ("ttft_ms", "TTFT", " ms"),
        ("tpot_ms", "TPOT", " ms"),
        ("tokens_per_second_per_gpu", "tokens/s per GPU", ""),
        ("tokens_per_second_per_user", "tokens/s per user", ""),
    ):
        if c[key] is not None:
            rows.append((f"  {label}", f"{_fmt(c[key], unit)} (aiconfigurator raw {_fmt(r[key], unit)})"))
    return rows


def stack_rows(
    stack: planner.StackPlan,
    est: Optional[perf.Estimate],
    error: Optional[str],
    w: perf.Workload,
    price: Optional[perf.ApiPrice] = None,
) -> list[tuple[str, str]]:
    if est is None:
        return [("performance", error or "unknown"), ("  aiconfigurator", tool_status())]
    cost = stack.cost_per_hour_usd
    basis = "Capacity Block billed whole" if stack.pricing and stack.pricing.billed_instances else "GPUs used"
    rows = [
        (
            "[performance]",
            f"{w.describe()}, {est.concurrency} requests in flight ({est.batch} per "
            f"{'decode ' if est.layout.mode == 'disagg' else ''}worker); modelled, raw in parentheses",
        ),
        (
            "  configuration",
            f"{est.layout.speculation.describe()} (the stack's worker flags)"
            + (f": {est.speedup:.2f}x plain TPOT" if est.layout.speculation.on else ""),
        ),
        (
            "  output tokens/s (stack)",
            f"{est.stack_tokens_per_second():,.0f} (raw {est.stack_tokens_per_second(False):,.0f})",
        ),
        (
            "  prefill queue",
            f"{est.arrival_rate:.3g} req/s "
            f"({'given' if w.request_rate else 'what this many requests in flight complete'}): "
            f"utilization {est.prefill_utilization:.0%}, wait {est.prefill_wait_ms:,.0f} ms "
            f"on top of {est.ttft_service_ms:,.0f} ms TTFT when idle (M/D/1 per prefill server)",
        ),
        ("  source", f"{est.source} ({tool_status()})"),
    ]
    if cost is not None:
        raw_mtok = perf.usd_per_million_output_tokens(cost, est.stack_tokens_per_second(False))
        rows.append(("  $/Mtok at raw throughput", f"${raw_mtok:,.2f} ({basis})"))
    rows += [("  note", n) for n in est.notes]
    rows.append(
        (
            "  across context lengths",
            "ISL: TTFT / TPOT / tok/s per GPU (all GPUs) / tok/s per user / $ per "
            f"Mtok ({basis}; modelled; fewer requests per worker where the KV cache holds fewer)",
        )
    )
    util = min(r.spec.gpu_memory_utilization for r in stack.roles)
    context = model_context()
    for isl in aic.CONTEXTS:
        if isl + w.osl > context:  # no such request: vLLM refuses a prompt + max_tokens beyond max-model-len
            rows.append(
                (
                    f"    {isl // 1024:,}k",
                    f"ISL {isl:,} + OSL {w.osl:,} is over the model's {context:,}-token "
                    "context: no such request (the `fits` row above is one request of the whole context)",
                )
            )
            continue
        e, err = _at_context(est, isl, w, util)
        if e is None:
            rows.append((f"    {isl // 1024:,}k", err))
            continue
        c = e.calibrated
        mtok = None if cost is None else perf.usd_per_million_output_tokens(cost, e.stack_tokens_per_second())
        load = "" if e.batch == est.batch else f"  ({e.batch} per worker)"
        rows.append(
            (
                f"    {isl // 1024:,}k",
                f"{c['ttft_ms']:,.0f} ms / {c['tpot_ms']:,.1f} ms / "
                f"{c['tokens_per_second_per_gpu']:,.1f} / {c['tokens_per_second_per_user']:,.1f} / "
                f"{'-' if mtok is None else f'${mtok:,.2f}'}{load}",
            )
        )
    rows += cost_rows(cost_vs_api(stack, est, w, price), w)
    return rows


def cost_rows(c: Optional[dict[str, Any]], w: perf.Workload) -> list[tuple[str, str]]:
    """The self-hosted vs API comparison, every figure with its cost basis."""
    if c is None:
        return [("[cost vs API]", "no price configured for the stack, or no performance figures")]
    load = (
        f"{c['requests_per_second']:.3g} req/s (--request-rate)"
        if w.request_rate
        else f"{c['requests_per_second']:.3g} req/s: the stack kept busy at this load (its capacity)"
    )
    rows = [
        ("[cost vs API]", f"{w.describe()}; API {c['api_model']} ({c['api_price_source']})"),
        (
            "  load",
            load
            + (
                ""
                if c["carries_the_load"]
                else f"; MORE than the {c['capacity_requests_per_second']:.3g} req/s it carries"
            ),
        ),
        (
            "  API",
            f"${c['api_usd_per_request']:,.4f} per request = ${c['api_usd_per_million_output_tokens']:,.2f} "
            "per million output tokens (its input included)",
        ),
    ]
    for basis, b in c["bases"].items():
        even = (
            f"cheaper than the API above {b['break_even_requests_per_second']:.3g} req/s "
            f"({b['break_even_utilization']:.0%} of capacity)"
            if b["break_even_reachable"]
            else f"never cheaper at this shape: break-even needs {b['break_even_requests_per_second']:.3g} req/s, "
            f"{b['break_even_utilization']:.1f}x what it carries"
        )
        rows.append(
            (
                f"  self-hosted, {BASIS_LABELS[basis]}",
                f"${b['usd_per_hour']:,.2f}/h: ${b['usd_per_request']:,.4f} per request = "
                f"${b['usd_per_million_output_tokens']:,.2f} per million output tokens; {even}",
            )
        )
    return rows


def _at_context(est: perf.Estimate, isl: int, w0: perf.Workload, util: float) -> tuple[Optional[perf.Estimate], str]:
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


def _platform_prices() -> tuple[dict[str, float], dict[str, int], dict[perf.Layout, str], list[str]]:
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


def run_sla(args: argparse.Namespace) -> int:
    ttft, tpot = parse_sla(args.sla)
    w = workload(args)
    if args.top < 1:
        raise ValueError(f"--top {args.top}: must be >= 1")
    spec = speculation(args, spec_tokens=getattr(args, "spec_tokens", 0) or 0)
    price = api_price(args)
    prices, gpn, ours, sources = _platform_prices()
    why = perf.Exclusions()
    found = sla.sla_search(ttft, tpot, w, prices, gpn, ours, speculation=spec, exclusions=why)
    best = found[0] if found else None
    api_req = price.per_request(w)

    def api(c: sla.Candidate) -> dict[str, Any]:
        capacity = c.estimate.requests_per_second_capacity * c.units
        return perf.cost_vs_api(w, price, capacity, {"gpus_used": c.cost_per_hour_usd}, w.request_rate)

    if args.json:
        print(
            json.dumps(
                {
                    "sla": {"ttft_ms": ttft, "tpot_ms": tpot},
                    "workload": {
                        "isl": w.isl,
                        "osl": w.osl,
                        "request_rate": w.request_rate,
                        "cache_hit_rate": w.cache_hit_rate,
                    },
                    "speculation": spec.describe(),
                    "prices": sources,
                    "tool": tool_status(),
                    "cost_basis": "gpus_used",
                    "api": {
                        "model": price.model,
                        "usd_per_request": round(api_req, 6),
                        "source": f"{price.source}, {price.as_of}",
                    },
                    "layouts": [{**c.to_json(), "cost_vs_api": api(c)} for c in found[: args.top]],
                    "ours": [c.to_json() for c in found if c.ours],
                    "excluded": why.to_json(),
                    "best_stack_config": sla.stack_config_for(best) if best else None,
                },
                indent=2,
            )
        )
        return 0 if found else 1
    print(
        f"Kimi K3 layouts meeting TTFT <= {ttft:g} ms and TPOT <= {tpot:g} ms at {w.describe()} "
        f"(modelled, {spec.describe()}; {len(found)} found, ranked by {'$/hour' if w.request_rate else '$ per Mtok'}):"
    )
    print("  prices: " + "; ".join(sources))
    print(
        "  cost basis: only the GPUs a layout uses, at the platform's $/GPU-hour (a Capacity Block is billed "
        "whole: `plan STACK` shows both); <- STACK marks the shape a stack deploys"
    )
    print(
        f"  API ({price.model}, {price.source}, {price.as_of}): ${api_req:,.4f} per request = "
        f"${api_req / w.osl * 1e6:,.2f} per million output tokens (input included)"
    )
    if not found:
        print("  none. Every layout x load was excluded:")
        for line in why.lines(ttft, tpot):
            print(f"    {line}")
        print(
            "  relax the limit named above, shorten the context, raise --cache-hit-rate if prefixes repeat, "
            "or lower --request-rate"
        )
        return 1
    header = (
        f"  {'#':>3}  {'layout':<38} {'batch':>5} {'GPUs':>5} {'nodes':>5} {'TTFT ms':>9} {'TPOT ms':>8} "
        f"{'tok/s/GPU':>9} {'tok/s/user':>10} {'$/hour':>9} {'$/Mtok':>8} {'API break-even':>15}"
    )
    print(header)
    best_ours = {c.ours: None for c in found[: args.top] if c.ours}  # listed already: not again
    for c in found[args.top :]:
        if c.ours and c.ours not in best_ours:
            best_ours[c.ours] = c
    further = [c for c in best_ours.values() if c is not None]
    shown = found[: args.top] + further
    for c in shown:
        if further and c is further[0]:  # the rank is kept: say that the ones between are left out
            print(
                f"  {'':>3}  ... ranks {args.top + 1}-{len(found)} not listed (--top {args.top}) except each "
                "stack's own best:"
            )
        e = c.estimate.calibrated
        mark = f"  <- {c.ours}" if c.ours else ""
        units = f"{c.units}x " if c.units > 1 else ""
        b = api(c)["bases"]["gpus_used"]
        even = f"{b['break_even_requests_per_second']:.3g} req/s" if b["break_even_reachable"] else "never"
        print(
            f"  {found.index(c) + 1:>3}  {units + c.estimate.layout.describe():<38} {c.estimate.batch:>5} {c.gpus:>5} "
            f"{c.nodes:>5} {e['ttft_ms']:>9,.0f} {e['tpot_ms']:>8,.1f} {e['tokens_per_second_per_gpu']:>9,.1f} "
            f"{e['tokens_per_second_per_user']:>10,.1f} {c.cost_per_hour_usd:>9,.2f} "
            f"{c.usd_per_million_output_tokens:>8,.2f} {even:>15}{mark}"
        )
    print(
        "  API break-even: the request rate above which the layout (GPUs used) costs less than the API for the "
        "same requests; 'never' = not within what it carries at that load"
    )
    if not any(c.ours for c in found):
        print(f"  (none of our stacks' layouts ({', '.join(STACKS)}) meets this SLA)")
    import yaml

    print(
        f"\nStack config that deploys #1 (Pulumi.<stack>.yaml `config:`; run {best.estimate.batch} requests per worker):"
    )
    print("\n".join("  " + line for line in yaml.safe_dump(sla.stack_config_for(best), sort_keys=False).splitlines()))
    return 0


def pareto_plot(stack: planner.StackPlan, title: str, path: str, w: perf.Workload) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout = layout_of(stack)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    # Every layout we rank on this platform at the requested context, grey: the frontier to beat.
    for other in perf.candidate_layouts():
        if other.gpu != layout.gpu or other == layout.unit()[0]:
            continue
        pts = [
            (p["tokens_per_second_per_user"], p["tokens_per_second_per_gpu"])
            for p in perf.curves(other, osl=w.osl)
            if "error" not in p and p["isl"] == _nearest_context(w.isl)
        ]
        if pts:
            ax.plot(*zip(*pts), color="0.8", marker=".", linewidth=1)
    ax.plot([], [], color="0.8", marker=".", label=f"other {layout.gpu} layouts @ {_nearest_context(w.isl) // 1024}k")
    cmap = plt.get_cmap("viridis")
    for i, isl in enumerate(aic.CONTEXTS):
        pts = [
            (p["tokens_per_second_per_user"], p["tokens_per_second_per_gpu"], p["kv_fits"])
            for p in perf.curves(layout, osl=w.osl)
            if "error" not in p and p["isl"] == isl
        ]
        if not pts:
            continue
        color = cmap(i / (len(aic.CONTEXTS) - 1))
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="o",
            color=color,
            label=f"{isl // 1024:,}k context" if isl < 2**20 else "1M context",
        )
        for x, y, fits in pts:
            if not fits:
                ax.plot(x, y, marker="x", color="red", markersize=9)
    ax.plot([], [], "rx", label="KV cache cannot hold that batch")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(
        f"Kimi K3 {title}: {layout.describe()}, OSL {w.osl:,}\n"
        "calibrated aiconfigurator estimates; points = 1, 4, 16, 64 requests per worker",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_plot(
    stack: planner.StackPlan, est: perf.Estimate, title: str, path: str, w: perf.Workload, price: perf.ApiPrice
) -> None:
    """Per cost basis, one panel: self-hosted $/Mtok of output against requests/s (up to what the stack carries
    at that context), and the API's bill for the same requests as a dashed line of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bases = cost_bases(stack)
    if not bases:
        raise ValueError("--cost-plot: the stack has no price configured (kimi-k3:pricing)")
    util = min(r.spec.gpu_memory_utilization for r in stack.roles)
    fig, axes = plt.subplots(1, len(bases), figsize=(6.5 * len(bases), 5.6), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, (basis, per_hour) in zip(axes[0], bases.items()):
        for i, isl in enumerate(aic.CONTEXTS):
            e, _ = _at_context(est, isl, w, util)
            if e is None:
                continue
            color = cmap(i / (len(aic.CONTEXTS) - 1))
            label = f"{isl // 1024:,}k" if isl < 2**20 else "1M"
            cap = e.requests_per_second_capacity
            rates = [cap * 10 ** (k / 20) for k in range(-40, 1)]  # two decades below what it carries
            mtok = [per_hour / 3600 / r / w.osl * 1e6 for r in rates]
            ax.plot(rates, mtok, color=color, label=f"{label} context (carries up to {cap:.3g} req/s)")
            ax.plot(rates[-1], mtok[-1], "o", color=color)
            api_req = price.per_request(perf.Workload(isl, w.osl, cache_hit_rate=w.cache_hit_rate))
            ax.axhline(api_req / w.osl * 1e6, color=color, linestyle="--", linewidth=1)
            even = per_hour / 3600 / api_req
            if even <= cap:  # the break-even load, where the curve meets the API's line
                ax.plot(even, api_req / w.osl * 1e6, "X", color="red", markersize=9)
        ax.plot([], [], "X", color="red", label="break-even (cheaper than the API to its right)")
        ax.plot([], [], color="0.4", linestyle="--", label=f"API {price.model} for the same requests")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("load (requests/s)")
        ax.set_ylabel("$ per million output tokens (input included)")
        ax.set_title(f"{BASIS_LABELS[basis]}: ${per_hour:,.2f}/h", fontsize="medium")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small", loc="lower left")
    fig.suptitle(
        f"Kimi K3 {title}: {est.layout.describe()}, OSL {w.osl:,}, "
        f"{w.cache_hit_rate:.0%} of input cached; a solid line below its dashed line = cheaper than the API\n"
        f"API price: {price.source}, {price.as_of}",
        fontsize="medium",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=120)
    plt.close(fig)


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


def _nearest_context(isl: int) -> int:
    return min(aic.CONTEXTS, key=lambda c: abs(c - isl))
