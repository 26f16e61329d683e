"""`kimi-k3 plan --sla`: rank every layout on GB200 and GB300 that meets a TTFT/TPOT limit, cheapest first, and print
the stack config that deploys the best (the search itself is kimi_k3/sizing/sla.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kimi_k3.commands import plan_args, plan_perf
from kimi_k3.sizing import perf, sla


def run_sla(args: argparse.Namespace) -> int:
    ttft, tpot = plan_args.parse_sla(args.sla)
    w = plan_args.workload(args)
    if args.top < 1:
        raise ValueError(f"--top {args.top}: must be >= 1")
    spec = plan_args.speculation(args, spec_tokens=getattr(args, "spec_tokens", 0) or 0)
    price = plan_args.api_price(args)
    prices, gpn, ours, sources = plan_perf.platform_prices()
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
                    "tool": plan_perf.tool_status(),
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
        print(f"  (none of our stacks' layouts ({', '.join(plan_perf.STACKS)}) meets this SLA)")
    import yaml

    print(
        f"\nStack config that deploys #1 (Pulumi.<stack>.yaml `config:`; run {best.estimate.batch} requests per worker):"
    )
    print("\n".join("  " + line for line in yaml.safe_dump(sla.stack_config_for(best), sort_keys=False).splitlines()))
    return 0
