"""What a trace replay measured (issue 21), for report.json's `trace`: the hit rate over time, each role's load, the
P:D ratio the trace needs and its sensitivity, and the cost per request on the stack vs the API's bill.

Sources, named in the report: the frontend's counters (dynamo_frontend_input_sequence_tokens_sum, _cached_tokens_sum,
_output_sequence_tokens_sum, the queued_requests gauge) and each mocker's own (dynamo_component_requests_total,
request_duration_seconds_sum, inflight_requests), sampled every SAMPLE_SECONDS during the replay; the ratio from
kimi_k3/sizing/trace_plan.py (what `kimi-k3 plan STACK --trace` prints); prices from recipes/facts/api-prices.yaml."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from kimi_k3.pods import workload
from kimi_k3.rehearsal import metrics
from kimi_k3.rehearsal.plan import Rehearsal
from kimi_k3.rehearsal.trace_sizing import capacity_rps, cost, graph_inputs, in_flight_at_replay, ratio
from kimi_k3.sizing import perf
from kimi_k3.sizing.trace_cache import Request

SAMPLE_SECONDS = 2.0
WINDOWS = 12  # hit rate over time: at most this many windows of the replay

FRONTEND = {
    "input": "dynamo_frontend_input_sequence_tokens_sum",
    "cached": "dynamo_frontend_cached_tokens_sum",
    "output": "dynamo_frontend_output_sequence_tokens_sum",
    "queued": "dynamo_frontend_queued_requests",
    "inflight": "dynamo_frontend_inflight_requests",  # requests in the system (--plan-config's queue check)
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


def active(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of the replay itself: from the last one before the frontend's counters first move to the first
    one after they last move (AIPerf spends its first seconds, a minute on 2 busy cores, synthesizing prompts)."""
    key = lambda s: (s["input"], s["output"])  # noqa: E731
    moved = [i for i in range(1, len(samples)) if key(samples[i]) != key(samples[i - 1])]
    if not moved:
        return []
    return list(samples[moved[0] - 1 : moved[-1] + 1])


# Why a role's figure is what it is (the router counts per phase; a mocker publishes KV events unless it decodes:
# dynamo/mocker/config.py kv_event_publishing_enabled = enable_prefix_caching and not is_decode).
ROLE_HIT_NOTES = {
    "prefill": "the prefix the router found cached on the prefill worker it chose (the workers' KV events)",
    "decode": "0 by construction: decode workers publish no KV events; they receive the prompt's KV from prefill",
    "agg": "the prefix the router found cached on the worker it chose (the workers' KV events)",
}


def hit_by_role(plan: Rehearsal, server_metrics: Optional[dict[str, Any]]) -> dict[str, Any]:
    """Per role: the KV router's prompt and cached-prefix tokens for the role's phase over the replay (AIPerf's
    server metrics export of the frontend's /metrics, as the cluster Job reads them: workload.hit_rate_by_phase)."""
    phases = workload.hit_rate_by_phase(server_metrics)
    out: dict[str, Any] = {}
    for r in plan.roles:
        got = phases.get(metrics.FRONTEND_WORKER_TYPE[r.mode])
        if got is not None:
            out[r.key] = {"mode": r.mode, **got, "note": ROLE_HIT_NOTES[r.mode]}
    return out


def measured(
    plan: Rehearsal,
    graph: Any,
    requests: Sequence[Request],
    samples: Sequence[dict[str, Any]],
    achieved_hit_rate: Optional[float],
    server_metrics: Optional[dict[str, Any]] = None,
    speedups: tuple[float, float] = (1.0, 1.0),
) -> dict[str, Any]:
    """report.json's `trace` additions: hit rate over time and per role, per-role load, the ratio and the cost."""
    samples = active(samples)
    out: dict[str, Any] = {
        "hit_rate_windows": hit_windows(samples),
        "hit_rate_by_role": hit_by_role(plan, server_metrics),
        "load_by_role": role_load(plan, samples),
    }
    try:
        out["ratio"] = ratio(requests, **graph_inputs(graph))
    except perf.PerfError as err:
        out["ratio"] = {"error": str(err)}
        return out
    replicas = {"prefill" if r.type == "prefill" else "decode": r.replicas for r in graph.roles}
    # What load_by_role's mean in flight should read at the replay's pace (tests/live/test_trace_balance_live.py)
    prefill_seqs = next((r.max_num_seqs for r in graph.roles if r.type == "prefill"), None)
    out["ratio"]["in_flight_at_replay"] = in_flight_at_replay(
        requests, out["ratio"], replicas, graph.decode_max_num_seqs, *speedups, prefill_max_num_seqs=prefill_seqs
    )
    try:
        from kimi_k3.blueprint import stack_plan

        used = stack_plan(plan.stack).used_cost_per_hour_usd
    except Exception as err:  # no pricing for this stack: the comparison says why instead of a number
        used, out["cost_note"] = None, f"no stack cost: {type(err).__name__}: {err}"
    out["cost"] = cost(requests, graph.block_size, used, capacity_rps(out["ratio"], replicas), achieved_hit_rate)
    return out


def measured_or_error(plan, graph, trace, sampler, kv_hit, say, out: Path, mocker_speedup: float) -> dict[str, Any]:
    """The replay's measured sections; a failure here is named in the report, never hides the rest."""
    try:
        exported = out / "aiperf" / "trace" / workload.SERVER_METRICS_FILE  # AIPerf's scrape of the frontend
        server = json.loads(exported.read_text()) if exported.is_file() else None
        samples = sampler.samples if sampler else []
        speeds = (trace.speedup, mocker_speedup)
        return measured(plan, graph, trace.requests, samples, kv_hit, server, speeds)
    except Exception as err:  # noqa: BLE001 (the report is written whatever happens)
        say(f"trace report incomplete: {type(err).__name__}: {err}")
        return {"measured_error": f"{type(err).__name__}: {err}"}
