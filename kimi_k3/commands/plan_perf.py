"""The performance part of `kimi-k3 plan`: latency/throughput/$-per-Mtok per role, curves, --sla, --pareto.

A thin shell over kimi_k3/perf.py (pure); kept apart from plan.py so its wording and layout can change freely.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Optional

from kimi_k3 import aiconfigurator as aic
from kimi_k3 import perf, planner

from .argtypes import context_tokens, model_context, positive, positive_int

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("performance (aiconfigurator, calibrated to public measurements)")
    g.add_argument("--isl", type=context_tokens, default=perf.DEFAULT_ISL, help=f"input tokens per request (default "
                   f"{perf.DEFAULT_ISL}: agentic turns carry long context)")
    g.add_argument("--osl", type=context_tokens, default=perf.DEFAULT_OSL, help=f"output tokens per request (default {perf.DEFAULT_OSL})")
    g.add_argument("--concurrency", type=positive_int, help="requests in flight per stack (default: "
                   f"{perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER} per decoding worker)")
    g.add_argument("--request-rate", type=positive, help="requests/s to sustain (--sla: replicate layouts to carry it)")
    g.add_argument("--sla", metavar="ttft_ms=N,tpot_ms=N", help="rank the layouts on GB200 and GB300 that meet it, "
                   "cheapest first, and print the stack config that deploys the best")
    g.add_argument("--top", type=positive_int, default=10, help="--sla: how many layouts to list (default 10)")
    g.add_argument("--pareto", metavar="FILE.png", help="draw tokens/s per GPU against tokens/s per user for the "
                   "stack across context lengths, over every layout on its platform")
    g.add_argument("--mocker-profile", metavar="FILE.npz", help="write the stack's calibrated timing as Dynamo "
                   "mocker profile data (dynamo.mocker --planner-profile-data FILE.npz)")


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
    return perf.Workload(args.isl, args.osl, args.concurrency, args.request_rate)


def layout_of(stack: planner.StackPlan) -> perf.Layout:
    return perf.Layout.from_roles(
        perf.RoleLayout(r.spec.name, "prefill" if r.spec.name == "prefill" else "decode", r.spec.gpu, r.spec.tp,
                        r.spec.replicas) for r in stack.roles)


def tool_status() -> str:
    ok, why = aic.available()
    if ok:
        return f"aiconfigurator {aic.VERSION} installed"
    return f"{why}; numbers come from the committed table recipes/perf-raw.yaml"


def performance(stack: planner.StackPlan, w: perf.Workload) -> tuple[Optional[perf.Estimate], Optional[str]]:
    try:
        util = min(r.spec.gpu_memory_utilization for r in stack.roles)
        return perf.estimate(layout_of(stack), w, gpu_memory_utilization=util), None
    except perf.PerfError as e:
        return None, str(e)


def to_json(stack: planner.StackPlan, est: Optional[perf.Estimate], error: Optional[str],
            w: perf.Workload) -> dict[str, Any]:
    """The `performance` block of plan --json, and the per-role keys merged into `roles`."""
    if est is None:
        return {"error": error, "tool": tool_status()}
    cal = perf.calibration()
    cost = stack.cost_per_hour_usd
    layout = est.layout
    curves = perf.curves(layout, osl=w.osl, cost_per_hour=cost,
                         gpu_memory_utilization=min(r.spec.gpu_memory_utilization for r in stack.roles))
    memory = {r.spec.name: perf.memory_comparison(r.spec.gpu, r.spec.tp) for r in stack.roles}
    return {
        "workload": {"isl": w.isl, "osl": w.osl, "concurrency": est.concurrency, "batch_per_worker": est.batch},
        "layout": layout.describe(), "source": est.source, "tool": tool_status(),
        "kv_fits": est.kv_fits, "kv_capacity_requests_per_worker": est.kv_capacity_per_worker,
        "output_tokens_per_second": round(est.stack_tokens_per_second(), 2),
        "raw_output_tokens_per_second": round(est.stack_tokens_per_second(False), 2),
        "ttft_ms": round(est.calibrated["ttft_ms"], 2), "tpot_ms": round(est.calibrated["tpot_ms"], 2),
        "raw_usd_per_million_output_tokens": None if cost is None else
        round(perf.usd_per_million_output_tokens(cost, est.stack_tokens_per_second(False)), 4),
        "calibration": {"measurements_used": list(cal.used), "held_out": list(cal.held_out),
                        "held_out_mean_abs_error": None if perf.held_out_error() is None else
                        round(perf.held_out_error(), 4)},
        "notes": list(est.notes), "curves": curves, "memory_vs_aiconfigurator": memory,
    }


def role_json(stack: planner.StackPlan, est: Optional[perf.Estimate]) -> dict[str, dict[str, Any]]:
    """ttft_ms / tpot_ms / tokens_per_second_per_gpu / tokens_per_second_per_user for every role (None if unknown)."""
    keys = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu", "tokens_per_second_per_user")
    out = {}
    cal = est.role_metrics(True) if est else {}
    raw = est.role_metrics(False) if est else {}
    for r in stack.roles:
        kind = "prefill" if r.spec.name == "prefill" else "decode"
        out[r.spec.name] = {**{k: cal.get(kind, {}).get(k) for k in keys},
                            "raw_performance": {k: raw.get(kind, {}).get(k) for k in keys}}
    return out


def _fmt(x: Optional[float], unit: str = "", digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}{unit}"


def role_rows(name: str, est: Optional[perf.Estimate], error: Optional[str]) -> list[tuple[str, str]]:
    if est is None:
        return [("  performance", "unknown (see [performance] below)")]
    kind = "prefill" if name == "prefill" else "decode"
    c, r = est.role_metrics(True)[kind], est.role_metrics(False)[kind]
    rows = []
    for key, label, unit in (("ttft_ms", "TTFT", " ms"), ("tpot_ms", "TPOT", " ms"),
                             ("tokens_per_second_per_gpu", "tokens/s per GPU", ""),
                             ("tokens_per_second_per_user", "tokens/s per user", "")):
        if c[key] is not None:
            rows.append((f"  {label}", f"{_fmt(c[key], unit)} (aiconfigurator raw {_fmt(r[key], unit)})"))
    return rows


def stack_rows(stack: planner.StackPlan, est: Optional[perf.Estimate], error: Optional[str],
               w: perf.Workload) -> list[tuple[str, str]]:
    if est is None:
        return [("performance", error or "unknown"), ("  aiconfigurator", tool_status())]
    cost = stack.cost_per_hour_usd
    rows = [
        ("[performance]", f"{w.describe()}, {est.concurrency} requests in flight ({est.batch} per "
                          f"{'decode ' if est.layout.mode == 'disagg' else ''}worker); calibrated, raw in parentheses"),
        ("  output tokens/s (stack)", f"{est.stack_tokens_per_second():,.0f} (raw {est.stack_tokens_per_second(False):,.0f})"),
        ("  source", f"{est.source} ({tool_status()})"),
    ]
    if cost is not None:
        raw_mtok = perf.usd_per_million_output_tokens(cost, est.stack_tokens_per_second(False))
        rows.append(("  $/Mtok at raw throughput", f"${raw_mtok:,.2f}"))
    rows += [("  note", n) for n in est.notes]
    rows.append(("  across context lengths", "ISL: TTFT / TPOT / tok/s per GPU (all GPUs) / tok/s per user / $ per "
                 "Mtok (calibrated; fewer requests per worker where the KV cache holds fewer)"))
    util = min(r.spec.gpu_memory_utilization for r in stack.roles)
    context = model_context()
    for isl in aic.CONTEXTS:
        if isl + w.osl > context:  # no such request: vLLM refuses a prompt + max_tokens beyond max-model-len
            rows.append((f"    {isl // 1024:,}k", f"ISL {isl:,} + OSL {w.osl:,} is over the model's {context:,}-token "
                         "context: no such request (the `fits` row above is one request of the whole context)"))
            continue
        e, err = _at_context(est, isl, w.osl, util)
        if e is None:
            rows.append((f"    {isl // 1024:,}k", err))
            continue
        c = e.calibrated
        mtok = None if cost is None else perf.usd_per_million_output_tokens(cost, e.stack_tokens_per_second())
        load = "" if e.batch == est.batch else f"  ({e.batch} per worker)"
        rows.append((f"    {isl // 1024:,}k", f"{c['ttft_ms']:,.0f} ms / {c['tpot_ms']:,.1f} ms / "
                     f"{c['tokens_per_second_per_gpu']:,.1f} / {c['tokens_per_second_per_user']:,.1f} / "
                     f"{'-' if mtok is None else f'${mtok:,.2f}'}{load}"))
    return rows


def _at_context(est: perf.Estimate, isl: int, osl: int, util: float) -> tuple[Optional[perf.Estimate], str]:
    """The layout at context `isl` with the requested load, or the most requests per worker that fit."""
    err = ""
    for batch in sorted((b for b in aic.BATCHES if b <= est.batch), reverse=True) or [1]:
        w = perf.Workload(isl, osl, batch * est.layout.replicas)
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
    from kimi_k3.commands.plan import stack_plan  # the same reader `plan STACK` uses

    prices, gpn, ours, sources = {}, {}, {}, []
    for name in STACKS:
        stack = stack_plan(name)
        layout = layout_of(stack)
        ours[layout] = name
        gpn[layout.gpu] = planner.load_platforms()[layout.gpu].gpus_per_node
        if stack.pricing is not None and layout.gpu not in prices:
            prices[layout.gpu] = perf.gpu_hour_usd(stack.pricing)
            sources.append(f"{layout.gpu}: ${prices[layout.gpu]:.3f}/GPU-hour ({stack.pricing.source}, "
                           f"{stack.pricing.as_of})")
    return prices, gpn, ours, sources


def run_sla(args: argparse.Namespace) -> int:
    ttft, tpot = parse_sla(args.sla)
    w = workload(args)
    prices, gpn, ours, sources = _platform_prices()
    found = perf.sla_search(ttft, tpot, w, prices, gpn, ours)
    best = found[0] if found else None
    if args.json:
        print(json.dumps({"sla": {"ttft_ms": ttft, "tpot_ms": tpot}, "workload": {"isl": w.isl, "osl": w.osl,
                          "request_rate": w.request_rate}, "prices": sources, "tool": tool_status(),
                          "layouts": [c.to_json() for c in found[:args.top]],
                          "ours": [c.to_json() for c in found if c.ours],
                          "best_stack_config": perf.stack_config_for(best) if best else None}, indent=2))
        return 0 if found else 1
    print(f"Kimi K3 layouts meeting TTFT <= {ttft:g} ms and TPOT <= {tpot:g} ms at {w.describe()} "
          f"(calibrated; {len(found)} found, ranked by {'$/hour' if w.request_rate else '$ per Mtok'}):")
    print("  prices: " + "; ".join(sources))
    print("  $/hour counts the GPUs a layout uses at that rate (a Capacity Block is billed whole: see `plan STACK`); "
          "<- STACK marks the shape a stack deploys")
    if not found:
        print("  none: relax the SLA, shorten the context, or lower --request-rate")
        return 1
    header = f"  {'#':>3}  {'layout':<38} {'batch':>5} {'GPUs':>5} {'nodes':>5} {'TTFT ms':>9} {'TPOT ms':>8} " \
             f"{'tok/s/GPU':>9} {'tok/s/user':>10} {'$/hour':>9} {'$/Mtok':>8}"
    print(header)
    best_ours = {c.ours: None for c in found[:args.top] if c.ours}   # listed already: not again
    for c in found[args.top:]:
        if c.ours and c.ours not in best_ours:
            best_ours[c.ours] = c
    further = [c for c in best_ours.values() if c is not None]
    shown = found[:args.top] + further
    for c in shown:
        if further and c is further[0]:  # the rank is kept: say that the ones between are left out
            print(f"  {'':>3}  ... ranks {args.top + 1}-{len(found)} not listed (--top {args.top}) except each "
                  "stack's own best:")
        e = c.estimate.calibrated
        mark = f"  <- {c.ours}" if c.ours else ""
        units = f"{c.units}x " if c.units > 1 else ""
        print(f"  {found.index(c) + 1:>3}  {units + c.estimate.layout.describe():<38} {c.estimate.batch:>5} {c.gpus:>5} "
              f"{c.nodes:>5} {e['ttft_ms']:>9,.0f} {e['tpot_ms']:>8,.1f} {e['tokens_per_second_per_gpu']:>9,.1f} "
              f"{e['tokens_per_second_per_user']:>10,.1f} {c.cost_per_hour_usd:>9,.2f} "
              f"{c.usd_per_million_output_tokens:>8,.2f}{mark}")
    if not any(c.ours for c in found):
        print(f"  (none of our stacks' layouts ({', '.join(STACKS)}) meets this SLA)")
    import yaml
    print(f"\nStack config that deploys #1 (Pulumi.<stack>.yaml `config:`; run {best.estimate.batch} requests per worker):")
    print("\n".join("  " + line for line in yaml.safe_dump(perf.stack_config_for(best), sort_keys=False).splitlines()))
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
        pts = [(p["tokens_per_second_per_user"], p["tokens_per_second_per_gpu"])
               for p in perf.curves(other, osl=w.osl) if "error" not in p and p["isl"] == _nearest_context(w.isl)]
        if pts:
            ax.plot(*zip(*pts), color="0.8", marker=".", linewidth=1)
    ax.plot([], [], color="0.8", marker=".", label=f"other {layout.gpu} layouts @ {_nearest_context(w.isl) // 1024}k")
    cmap = plt.get_cmap("viridis")
    for i, isl in enumerate(aic.CONTEXTS):
        pts = [(p["tokens_per_second_per_user"], p["tokens_per_second_per_gpu"], p["kv_fits"])
               for p in perf.curves(layout, osl=w.osl) if "error" not in p and p["isl"] == isl]
        if not pts:
            continue
        color = cmap(i / (len(aic.CONTEXTS) - 1))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color,
                label=f"{isl // 1024:,}k context" if isl < 2**20 else "1M context")
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
    ax.set_title(f"Kimi K3 {title}: {layout.describe()}, OSL {w.osl:,}\n"
                 "calibrated aiconfigurator estimates; points = 1, 4, 16, 64 requests per worker", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_mocker_profile(stack: planner.StackPlan, w: perf.Workload, path: str) -> None:
    perf.write_mocker_profile(perf.mocker_profile(layout_of(stack), w.osl), path)


def _nearest_context(isl: int) -> int:
    return min(aic.CONTEXTS, key=lambda c: abs(c - isl))
