"""What a trace's traffic needs and costs: the P:D ratio (and its sensitivity), the cost per request vs the API."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from kimi_k3.sizing import mocker, perf, prefill_sim, trace_plan
from kimi_k3.sizing.trace_cache import Request, cacheable_tokens

SENSITIVITY = 0.25  # the ratio at ISL and OSL x (1 -/+ this)


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


def graph_inputs(graph: Any) -> dict[str, Any]:
    """pd_ratio's layout keywords as the graph deploys them (one place: the report and --plan-config read the same)."""
    prefill_tp, decode_tp = layout(graph.roles)
    return dict(
        gpu=graph.platform.name,
        prefill_tp=prefill_tp,
        decode_tp=decode_tp,
        block_size=graph.block_size,
        max_num_seqs=graph.decode_max_num_seqs,
        prefill_token_budget=graph.prefill_token_budget,
    )


def ratio(
    requests: Sequence[Request],
    gpu: str,
    prefill_tp: int,
    decode_tp: int,
    block_size: int,
    max_num_seqs: Optional[int] = None,
    prefill_token_budget: Optional[int] = None,
) -> dict[str, Any]:
    """trace_plan.pd_ratio (plan --trace) and its sensitivity to ISL and OSL x (1 -/+ SENSITIVITY)."""
    kw = dict(
        gpu=gpu,
        prefill_tp=prefill_tp,
        decode_tp=decode_tp,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        prefill_token_budget=prefill_token_budget,
    )
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
        "in_flight_alone",
        "prefill_token_budget",
        "gpu",
        "prefill_tp",
        "decode_tp",
        "block_size",
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


TIMER_MS = 1.0  # a mocker step lasts at least this (measured: ITL p50 1.0 ms where the table / 20 says 0.72)
# What dynamo.mocker 1.6.1 runs with where the role sets no --max-num-batched-tokens / --max-num-seqs (its args.py)
MOCKER_DEFAULT_MAX_NUM_BATCHED_TOKENS, MOCKER_DEFAULT_MAX_NUM_SEQS = 8192, 256
# The rehearsal's frontend before the prefill worker (kimi_k3/sizing/prefill_sim.py `frontend`): 2 lanes (its
# runtime's worker threads on the 2-core machine), each request 8.1 ms + 1.25 us per prompt token: the mean of
# three runs' burst heads (7.1 + 1.00, 7.3 + 1.46, 9.9 + 1.29; load average 0.3, 2026-12-02, docs/traces.md)
FRONTEND_LANES, FRONTEND_COST = 2, (8.1, 1.25)


def in_flight_at_replay(
    requests: Sequence[Request],
    r: dict[str, Any],
    replicas: dict[str, int],
    max_num_seqs: Optional[int] = None,
    trace_speedup: float = 1.0,
    mocker_speedup: float = 1.0,
    prefill_max_num_seqs: Optional[int] = None,
    frontend_cost: tuple[float, float] = FRONTEND_COST,
) -> dict[str, Any]:
    """Requests in each role on average (Little's law) that plan --trace's timing (`r`, trace_plan.pd_ratio) predicts
    for this replay: arrivals --trace-speedup times faster, every mocker step --speedup-ratio times shorter but at
    least TIMER_MS. Prefill: `prefill_simulated`, the deployed prefill workers stepped as the mocker steps them
    (kimi_k3/sizing/prefill_sim.py: shared per-step token budget, --max-num-seqs, table at the batch's new tokens,
    each prompt's best-cache hit), reached through the frontend's preprocessing (`frontend_cost`: ms + us per
    prompt token, FRONTEND_COST measured), the figure the rehearsal's measurement is held to; beside it the two queueing
    extremes, each alone (no waiting) and one FCFS queue over the workers. Decode: each alone, stepping at its own
    context."""
    profile = mocker.disagg_profile(r["gpu"], r["prefill_tp"], r["decode_tp"], max_num_seqs)
    arrivals = [q.timestamp_ms / 1000 / trace_speedup for q in requests]
    span = (arrivals[-1] - arrivals[0]) * len(requests) / (len(requests) - 1)  # (n-1)/span is pd_ratio's rate
    budget = r.get("prefill_token_budget")
    service = [t / mocker_speedup for t in trace_plan.prefill_seconds(requests, r["block_size"], profile, budget)]
    step = lambda ms: max(ms / mocker_speedup, TIMER_MS) / 1000  # noqa: E731
    decode = sum(
        q.output_length * step(mocker.decode_itl_ms(profile, c, c))
        for q in requests
        for c in [q.input_length + q.output_length / 2]
    )
    tokens, cached = [q.input_length for q in requests], cacheable_tokens(requests, r["block_size"])
    at_worker = prefill_sim.frontend(
        arrivals, tokens, lanes=FRONTEND_LANES, fixed_ms=frontend_cost[0], us_per_token=frontend_cost[1]
    )
    order = sorted(range(len(requests)), key=lambda k: (at_worker[k], k))
    simulated = prefill_sim.simulate(
        [at_worker[k] for k in order],
        [tokens[k] for k in order],
        [cached[k] for k in order],
        profile,
        workers=replicas.get("prefill") or 1,
        token_budget=budget or MOCKER_DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=prefill_max_num_seqs or MOCKER_DEFAULT_MAX_NUM_SEQS,
        speedup=mocker_speedup,
        floor_ms=TIMER_MS,
    )
    return {
        "prefill_simulated": round(sum(simulated) / span, 4),
        "prefill_alone": round(sum(service) / span, 4),
        "prefill_fcfs": round(trace_plan.fcfs_busy(arrivals, service, replicas.get("prefill") or 1) / span, 4),
        "decode_alone": round(decode / span, 4),
        "step_floor_ms": TIMER_MS,
        "prefill_max_num_seqs": prefill_max_num_seqs or MOCKER_DEFAULT_MAX_NUM_SEQS,
        "frontend_ms_and_us_per_token": list(frontend_cost),
    }
