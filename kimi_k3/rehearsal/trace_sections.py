"""report.md's trace sections and the trace plots, from report.json's `trace`."""

from __future__ import annotations

from typing import Any, Callable, Optional


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _usd(v: Optional[float]) -> str:
    return "-" if v is None else f"${v:,.4f}"


def markdown(t: dict[str, Any]) -> list[str]:
    """report.md's trace sections (after the load table)."""
    lines: list[str] = []
    load = t.get("load_by_role") or {}
    if load:
        lines += [
            "",
            "## Trace: load per role",
            "",
            f"Over the replay's {load['replay_wall_s']:,.1f} s; frontend queue mean "
            f"{load['frontend_queued']['mean']:g}, max {load['frontend_queued']['max']:g} requests.",
            "",
            "| role | replicas | requests | prefill tok/s | decode tok/s | in flight per worker (mean) "
            "| peak in flight | utilisation |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, r in load["roles"].items():
            f = lambda v: "-" if v is None else f"{v:,.1f}"  # noqa: E731
            lines.append(
                f"| {key} ({r['mode']}) | {r['replicas']} | {r['requests']} | {f(r['prefill_tokens_per_s'])} "
                f"| {f(r['decode_tokens_per_s'])} | {r['mean_in_flight_per_worker']:.2f} "
                f"| {r['peak_in_flight']:g} | {_pct(r['utilisation'])} |"
            )
        lines += [""] + [f"- {k}: {v}" for k, v in load["sources"].items()]
    by_role = t.get("hit_rate_by_role") or {}
    if by_role:
        lines += [
            "",
            "## Trace: KV hit rate per role (the KV router's counters)",
            "",
            "| role | prompt tokens | cached prefix tokens | hit rate | backend-reported reused | why |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {key} ({r['mode']}) | {r['input_tokens']:,} | {r['cached_tokens']:,} | {_pct(r['hit_rate'])} "
            f"| {'-' if r['worker_reported_reused_tokens'] is None else format(r['worker_reported_reused_tokens'], ',')} "
            f"| {r['note']} |"
            for key, r in by_role.items()
        ]
    windows = t.get("hit_rate_windows") or []
    if windows:
        lines += [
            "",
            "## Trace: KV hit rate over time",
            "",
            "| window (s) | prompt tokens | cached | hit rate |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {w['t0_s']:.0f}-{w['t1_s']:.0f} | {w['input_tokens']:,} | {w['cached_tokens']:,} "
            f"| {_pct(w['hit_rate'])} |"
            for w in windows
        ]
        lines += ["", f"Best any cache could reach on the whole selection: {_pct(t.get('best_hit_rate'))}."]
    r = t.get("ratio") or {}
    if "workers" in r:
        lines += [
            "",
            "## Trace: prefill:decode ratio (`kimi-k3 plan STACK --trace`)",
            "",
            f"Needed at the trace's rate: {r['prefill_workers_needed']:.2f} prefill + "
            f"{r['decode_workers_needed']:.2f} decode workers -> P:D 1:{r['decode_per_prefill']:.2f}, "
            f"prefill {100 * r['prefill_gpu_share']:.0f}% of the GPUs; deploy {r['workers']['prefill']} "
            f"prefill + {r['workers']['decode']} decode.",
            "",
            "| traffic | decode per prefill | prefill GPU share | workers P + D |",
            "|---|---|---|---|",
            f"| as recorded | {r['decode_per_prefill']:.2f} | {_pct(r['prefill_gpu_share'])} "
            f"| {r['workers']['prefill']} + {r['workers']['decode']} |",
        ]
        for name, s in r["sensitivity"].items():
            lines.append(
                f"| {name.upper()} | {s['decode_per_prefill']:.2f} | {_pct(s['prefill_gpu_share'])} "
                f"| {s['workers']['prefill']} + {s['workers']['decode']} |"
            )
    elif r:
        lines += ["", f"P:D ratio: not computed ({r.get('error')})"]
    pc = t.get("plan_config")
    if pc:
        q, sla = pc["queues"], pc["sla"]
        lines += [
            "",
            "## Trace: the plan --trace config, rehearsed (`--plan-config`)",
            "",
            f"Deployed {pc['prefill']} prefill + {pc['decode']} decode (plan --trace: {pc['plan_workers']['prefill']} "
            f"+ {pc['plan_workers']['decode']}; needed at the replay's timing {pc['workers_needed']['prefill']:g} + "
            f"{pc['workers_needed']['decode']:g}): **{'confirmed' if pc['confirmed'] else 'NOT confirmed'}**.",
            "",
            f"- requests served: {pc['requests_served']} ({'all' if pc['all_served'] else 'NOT all'})",
            f"- queues bounded: {q['bounded']} (requests in the system, mean first half "
            f"{q.get('in_system_mean_first_half', '-')}, second half {q.get('in_system_mean_second_half', '-')}; "
            f"{q.get('rule', q.get('why'))})",
            f"- SLA held: {sla['held']} (p99 at the model's pace TTFT {sla['p99_at_model_pace']['ttft_ms']} ms, ITL "
            f"{sla['p99_at_model_pace']['itl_ms']} ms; p95 limits {sla['limits_p95']['ttft_ms']:g} / "
            f"{sla['limits_p95']['itl_ms']:g} ms)",
            f"- caveat: {pc['caveat']}",
        ]
    c = t.get("cost")
    if c:
        lines += [
            "",
            "## Trace: cost per request, the stack vs the API",
            "",
            f"- on the stack ({_usd(c['stack_usd_per_hour_gpus_used'])}/h for the GPUs it uses): "
            f"{_usd(c['stack_usd_per_request_at_trace_rate'])} a request at the trace's "
            f"{c['trace_rate_per_s']:g} req/s, {_usd(c['stack_usd_per_request_at_capacity'])} at its capacity "
            f"for this mix ({c['stack_capacity_requests_per_s'] or 0:g} req/s, performance model)"
            + (
                " - **the deployed stack cannot keep up with this rate** (see the ratio above)"
                if c.get("stack_keeps_up") is False
                else ""
            ),
            f"- the API ({c['api_model']}: input ${c['api_price_usd_per_mtok']['input_cache_miss']:g}, cached "
            f"${c['api_price_usd_per_mtok']['input_cache_hit']:g}, output ${c['api_price_usd_per_mtok']['output']:g}"
            f" per Mtok; {c['api_price_source']}): {_usd(c['api_usd_per_request_best_cache'])} a request with "
            f"the best cache, {_usd(c['api_usd_per_request_achieved_cache'])} at the achieved hit rate",
        ]
    return lines


def draw(report: dict[str, Any], out: Any, plt: Any, save: Callable[[Any, str, dict[str, Any]], None]) -> list[str]:
    """PNG plots of the trace sections; each PNG carries the figures it shows as JSON in its Description text chunk
    (read back by tests/unit/test_trace_report.py)."""
    t = report.get("trace") or {}
    files = []
    windows = [w for w in t.get("hit_rate_windows") or [] if w["hit_rate"] is not None]
    if windows:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        xs = [(w["t0_s"] + w["t1_s"]) / 2 for w in windows]
        ys = [w["hit_rate"] for w in windows]
        ax.plot(xs, ys, marker="o", label="achieved (frontend)")
        ax.axhline(t["best_hit_rate"], color="gray", linestyle="--", label="best any cache (trace hashes)")
        ax.set_ylim(0, 1)
        ax.set_xlabel("replay time (s)")
        ax.set_ylabel("KV hit rate")
        ax.legend(fontsize=8)
        ax.set_title(f"{report['stack']}: KV hit rate over the replay")
        save(fig, "trace_hit_rate.png", {"hit_rate": ys, "best_hit_rate": t["best_hit_rate"]})
        files.append("trace_hit_rate.png")
    load = (t.get("load_by_role") or {}).get("roles") or {}
    if load:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        names = list(load)
        vals = [(load[n]["prefill_tokens_per_s"] or 0) + (load[n]["decode_tokens_per_s"] or 0) for n in names]
        bars = ax.bar(names, vals)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
        ax.set_ylabel("tokens/s processed")
        ax.set_title(f"{report['stack']}: load per role (prefill: uncached input; decode: output)")
        save(fig, "trace_role_load.png", {"tokens_per_s": dict(zip(names, vals))})
        files.append("trace_role_load.png")
    r = t.get("ratio") or {}
    if "sensitivity" in r:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        names = ["as recorded", *r["sensitivity"]]
        vals = [r["decode_per_prefill"], *(s["decode_per_prefill"] for s in r["sensitivity"].values())]
        bars = ax.bar(names, vals)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
        ax.set_ylabel("decode workers per prefill worker")
        ax.set_title(f"{report['stack']}: P:D ratio and its sensitivity (ISL, OSL -/+25%)")
        save(fig, "trace_ratio.png", {"decode_per_prefill": dict(zip(names, vals))})
        files.append("trace_ratio.png")
    return files
