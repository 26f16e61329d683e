"""What a trace replay measured (issue 21), for report.json's `trace`: the hit rate over time, each role's load, the
P:D ratio the trace needs and its sensitivity, and the cost per request on the stack vs the API's bill.

Sources, named in the report: the frontend's counters (dynamo_frontend_input_sequence_tokens_sum, _cached_tokens_sum,
_output_sequence_tokens_sum, the queued_requests gauge) and each mocker's own (dynamo_component_requests_total,
request_duration_seconds_sum, inflight_requests), sampled every SAMPLE_SECONDS during the replay; the ratio from
kimi_k3/sizing/trace_plan.py (what `kimi-k3 plan STACK --trace` prints); prices from recipes/facts/api-prices.yaml."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

from kimi_k3.rehearsal import metrics
from kimi_k3.rehearsal.plan import Rehearsal
from kimi_k3.sizing import perf, trace_plan
from kimi_k3.sizing.trace_cache import Request, cacheable_tokens

SAMPLE_SECONDS = 2.0
WINDOWS = 12  # hit rate over time: at most this many windows of the replay
SENSITIVITY = 0.25  # the ratio at ISL and OSL x (1 -/+ this)

FRONTEND = {
    "input": "dynamo_frontend_input_sequence_tokens_sum",
    "cached": "dynamo_frontend_cached_tokens_sum",
    "output": "dynamo_frontend_output_sequence_tokens_sum",
    "queued": "dynamo_frontend_queued_requests",
}
WORKER = {
    "requests": "dynamo_component_requests_total",
    "busy": "dynamo_component_request_duration_seconds_sum",
    "inflight": "dynamo_component_inflight_requests",
}
SOURCES = {
    "prefill_tokens_per_s": "frontend: (input - cached) tokens / replay seconds (the prompt tokens a prefill computes)",
    "decode_tokens_per_s": "frontend: output tokens / replay seconds",
    "mean_in_flight_per_worker": "mocker: request_duration_seconds_sum / replay seconds / replicas (Little's law)",
    "peak_in_flight": "mocker: inflight_requests gauge, highest sample of the role",
    "utilisation": "mean in flight per worker / the batch it serves at once (prefill 1, decode the perf model's "
    f"{perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER})",
    "frontend_queued": "frontend: queued_requests gauge, mean and highest sample",
}


class Sampler:
    """The frontend's and every worker's metrics every SAMPLE_SECONDS (call tick() often; it rate-limits itself)."""

    def __init__(self, plan: Rehearsal, scrape: Callable[[int], list], clock: Callable[[], float] = time.monotonic):
        self.plan, self.scrape, self.clock = plan, scrape, clock
        self.t0 = clock()
        self.last = -SAMPLE_SECONDS
        self.samples: list[dict[str, Any]] = []

    def tick(self, force: bool = False) -> None:
        now = self.clock() - self.t0
        if not force and now - self.last < SAMPLE_SECONDS:
            return
        self.last = now
        fe = self.scrape(self.plan.http_port)
        workers = {}
        for p in self.plan.workers:
            s = self.scrape(p.metrics_port)
            workers[p.name] = {
                "role": p.role,
                "requests": metrics.metric_sum(s, WORKER["requests"], dynamo_endpoint="generate"),
                "busy": metrics.metric_sum(s, WORKER["busy"], dynamo_endpoint="generate"),
                "inflight": metrics.metric_sum(s, WORKER["inflight"], dynamo_endpoint="generate"),
            }
        self.samples.append(
            {"t": round(now, 3), **{k: metrics.metric_sum(fe, n) for k, n in FRONTEND.items()}, "workers": workers}
        )


def hit_windows(samples: Sequence[dict[str, Any]], windows: int = WINDOWS) -> list[dict[str, Any]]:
    """The frontend's cached / input tokens per window of the replay (consecutive samples merged into at most
    `windows` windows of equal sample count; a window with no new prompt tokens has no rate)."""
    if len(samples) < 2:
        return []
    step = max(1, -(-(len(samples) - 1) // windows))
    out = []
    for i in range(0, len(samples) - 1, step):
        a, b = samples[i], samples[min(i + step, len(samples) - 1)]
        new, cached = b["input"] - a["input"], b["cached"] - a["cached"]
        out.append(
            {
                "t0_s": a["t"],
                "t1_s": b["t"],
                "input_tokens": int(new),
                "cached_tokens": int(cached),
                "hit_rate": None if new <= 0 else round(cached / new, 4),
            }
        )
    return out


def role_load(plan: Rehearsal, samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per role: tokens/s it processed, requests in flight (mean, peak), utilisation; the frontend's queue."""
    if len(samples) < 2:
        return {}
    a, b = samples[0], samples[-1]
    wall = max(b["t"] - a["t"], 1e-9)
    prefill_tps = (b["input"] - a["input"] - (b["cached"] - a["cached"])) / wall
    decode_tps = (b["output"] - a["output"]) / wall
    roles: dict[str, Any] = {}
    for r in plan.roles:
        names = [n for n, w in b["workers"].items() if w["role"] == r.key]
        busy = sum(b["workers"][n]["busy"] - a["workers"].get(n, {}).get("busy", 0) for n in names)
        served = sum(b["workers"][n]["requests"] - a["workers"].get(n, {}).get("requests", 0) for n in names)
        mean = busy / wall / max(1, len(names))
        batch = 1 if r.mode == "prefill" else perf.DEFAULT_CONCURRENCY_PER_DECODE_WORKER
        roles[r.key] = {
            "mode": r.mode,
            "replicas": r.replicas,
            "requests": int(served),
            "prefill_tokens_per_s": None if r.mode == "decode" else round(prefill_tps, 1),
            "decode_tokens_per_s": None if r.mode == "prefill" else round(decode_tps, 1),
            "mean_in_flight_per_worker": round(mean, 3),
            "peak_in_flight": max(sum(s["workers"].get(n, {}).get("inflight", 0) for n in names) for s in samples),
            "utilisation": round(mean / batch, 3),
        }
    queued = [s["queued"] for s in samples]
    return {
        "replay_wall_s": round(wall, 2),
        "roles": roles,
        "frontend_queued": {"mean": round(sum(queued) / len(queued), 2), "max": max(queued)},
        "sources": SOURCES,
    }


def _scaled(requests: Sequence[Request], isl: float = 1.0, osl: float = 1.0) -> list[Request]:
    """The same arrivals and prefix hashes with input and output lengths scaled (a longer input's extra tokens are
    past its hashes: uncached)."""
    return [
        dataclasses.replace(
            r, input_length=max(1, round(r.input_length * isl)), output_length=max(1, round(r.output_length * osl))
        )
        for r in requests
    ]


def layout(plan_roles: Sequence[Any]) -> tuple[int, int]:
    """(prefill TP, decode TP) of a graph's roles: an aggregated stack's one TP for both."""
    tps = {r.type: r.tp for r in plan_roles}
    decode = tps.get("decode") or next(iter(tps.values()))
    return tps.get("prefill", decode), decode


def ratio(requests: Sequence[Request], gpu: str, prefill_tp: int, decode_tp: int, block_size: int) -> dict[str, Any]:
    """trace_plan.pd_ratio (plan --trace) and its sensitivity to ISL and OSL x (1 -/+ SENSITIVITY)."""
    kw = dict(gpu=gpu, prefill_tp=prefill_tp, decode_tp=decode_tp, block_size=block_size)
    base = trace_plan.pd_ratio(requests, **kw)
    sens = {}
    for name, key in (("isl", "isl"), ("osl", "osl")):
        for f in (1 - SENSITIVITY, 1 + SENSITIVITY):
            r = trace_plan.pd_ratio(_scaled(requests, **{key: f}), **kw)
            sens[f"{name} x{f:g}"] = {k: r[k] for k in ("decode_per_prefill", "prefill_gpu_share", "workers")}
    keep = (
        "prefill_workers_needed",
        "decode_workers_needed",
        "decode_per_prefill",
        "prefill_gpu_share",
        "workers",
        "prefill_requests_per_second_per_worker",
        "decode_requests_per_second_per_worker",
        "source",
    )
    return {**{k: base[k] for k in keep}, "sensitivity": sens}


def cost(
    requests: Sequence[Request],
    block_size: int,
    used_cost_per_hour: Optional[float],
    capacity_rps: Optional[float],
    achieved_hit_rate: Optional[float],
) -> dict[str, Any]:
    """Cost per request of this traffic on the stack (its GPUs' hourly cost over the requests an hour brings, at
    the trace's own rate and at the stack's capacity for this mix) vs the API's bill for the same requests (input,
    cached input and output priced separately, perf.ApiPrice.per_request), with the cache the API could at best hit
    (the trace's prefix hashes) and with the rehearsal's achieved hit rate."""
    model, prices = perf.api_prices()
    price = prices[model]
    best = cacheable_tokens(requests, block_size)
    n = len(requests)

    def bill(hit_of) -> float:
        return (
            sum(
                price.per_request(
                    perf.Workload(isl=r.input_length, osl=r.output_length, cache_hit_rate=min(hit_of(r, c), 0.999999))
                )
                for r, c in zip(requests, best)
            )
            / n
        )

    load = trace_plan.trace_load(requests, block_size)
    rate = load["arrival_rate_per_s"]
    per = lambda rps: None if used_cost_per_hour is None or not rps else round(used_cost_per_hour / (rps * 3600), 6)  # noqa: E731
    return {
        "api_model": model,
        "api_price_usd_per_mtok": {k: getattr(price, k) for k in perf.API_PRICE_KEYS},
        "api_price_source": f"{price.source} (as of {price.as_of})",
        "api_usd_per_request_best_cache": round(bill(lambda r, c: c / r.input_length), 6),
        "api_usd_per_request_achieved_cache": None
        if achieved_hit_rate is None
        else round(bill(lambda r, c: achieved_hit_rate), 6),
        "stack_usd_per_hour_gpus_used": None if used_cost_per_hour is None else round(used_cost_per_hour, 2),
        "stack_usd_per_request_at_trace_rate": per(rate),
        "stack_capacity_requests_per_s": None if capacity_rps is None else round(capacity_rps, 4),
        "stack_usd_per_request_at_capacity": per(capacity_rps),
        # below the trace's rate the deployed stack queues without bound: its per-request cost at that rate is moot
        "stack_keeps_up": None if capacity_rps is None else capacity_rps >= rate,
        "trace_rate_per_s": round(rate, 4),
    }


def capacity_rps(r: dict[str, Any], replicas: dict[str, int]) -> float:
    """Requests/s the stack's deployed replicas serve for this mix (the slower role bounds it; perf model)."""
    p = r["prefill_requests_per_second_per_worker"] * replicas.get("prefill", 0)
    d = r["decode_requests_per_second_per_worker"] * replicas.get("decode", 0)
    if not replicas.get("prefill"):  # aggregated: each worker prefills and decodes; its time splits between them
        return replicas.get("decode", 0) / (
            1 / r["prefill_requests_per_second_per_worker"] + 1 / r["decode_requests_per_second_per_worker"]
        )
    return min(p, d)


def active(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of the replay itself: from the last one before the frontend's counters first move to the first
    one after they last move (AIPerf spends its first seconds, a minute on 2 busy cores, synthesizing prompts)."""
    key = lambda s: (s["input"], s["output"])  # noqa: E731
    moved = [i for i in range(1, len(samples)) if key(samples[i]) != key(samples[i - 1])]
    if not moved:
        return []
    return list(samples[moved[0] - 1 : moved[-1] + 1])


def measured(
    plan: Rehearsal,
    graph: Any,
    requests: Sequence[Request],
    samples: Sequence[dict[str, Any]],
    achieved_hit_rate: Optional[float],
) -> dict[str, Any]:
    """report.json's `trace` additions: hit rate over time, per-role load, the ratio and the cost comparison."""
    samples = active(samples)
    out: dict[str, Any] = {"hit_rate_windows": hit_windows(samples), "load_by_role": role_load(plan, samples)}
    prefill_tp, decode_tp = layout(graph.roles)
    try:
        out["ratio"] = ratio(requests, graph.platform.name, prefill_tp, decode_tp, graph.block_size)
    except perf.PerfError as err:
        out["ratio"] = {"error": str(err)}
        return out
    replicas = {"prefill" if r.type == "prefill" else "decode": r.replicas for r in graph.roles}
    try:
        from kimi_k3.blueprint import stack_plan

        used = stack_plan(plan.stack).used_cost_per_hour_usd
    except Exception as err:  # no pricing for this stack: the comparison says why instead of a number
        used, out["cost_note"] = None, f"no stack cost: {type(err).__name__}: {err}"
    out["cost"] = cost(requests, graph.block_size, used, capacity_rps(out["ratio"], replicas), achieved_hit_rate)
    return out


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
