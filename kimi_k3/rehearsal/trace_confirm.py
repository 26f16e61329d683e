"""`kimi-k3 rehearse STACK --trace FILE --plan-config` (issue 21): deploy the P:D config `kimi-k3 plan STACK --trace
FILE` prints for the same selection, replay the trace on it and say whether queues stayed bounded and the SLA held.

Caveat, carried in the report: the mockers step at the speed of the performance model the plan sized with (divided by
--speedup-ratio), so this confirms the plan's queueing arithmetic against its own model on real Dynamo processes,
not the model against hardware."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

from kimi_k3.errors import UserError
from kimi_k3.rehearsal.options import RehearseOptions

CAVEAT = (
    "the mockers run at the performance model's speed (the model plan --trace sized with, / --speedup-ratio): "
    "this confirms the plan's queueing against its own model with real Dynamo processes, not against hardware"
)
# A queue that grows without bound grows ~linearly: its second half's mean is ~3x its first half's. A stable one
# fluctuates around its level. Bounded: second half mean <= GROWTH x first half + SLACK (SLACK absorbs 0-2 request
# levels of a light replay).
GROWTH, SLACK = 2.0, 1.0


def plan_config(ratio: Mapping[str, Any], trace_speedup: float, mocker_speedup: float) -> dict[str, Any]:
    """The workers of each role `plan --trace` deploys (its `workers`: ceil of the needed, at least 1), at the
    replay's timing: the arrival rate x --trace-speedup, each worker's rate x --speedup-ratio (both 1: plan's own)."""
    scale = trace_speedup / mocker_speedup
    need = {k: ratio[f"{k}_workers_needed"] * scale for k in ("prefill", "decode")}
    return {
        "prefill": max(1, math.ceil(round(need["prefill"], 6))),
        "decode": max(1, math.ceil(round(need["decode"], 6))),
        "workers_needed": {k: round(v, 3) for k, v in need.items()},
        "plan_workers": dict(ratio["workers"]),
        "scale": round(scale, 6),
    }


def apply(graph: Any, config: Mapping[str, int], stack: str) -> Any:
    """The graph with its prefill and decode roles at the config's replicas (a disaggregated stack only)."""
    types = {r.type for r in graph.roles}
    if "prefill" not in types:
        raise UserError(
            f"--plan-config: {stack} is aggregated; plan --trace's P:D split is for a disaggregated stack of the same "
            f"TP: rehearse a -disagg stack with it"
        )
    roles = tuple(
        dataclasses.replace(r, replicas=config["prefill" if r.type == "prefill" else "decode"]) for r in graph.roles
    )
    return dataclasses.replace(graph, roles=roles)


def queues_bounded(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Requests in the system (the frontend's inflight gauge) over the replay's first and second halves."""
    if len(samples) < 4:
        return {"bounded": None, "why": f"{len(samples)} samples: too few to compare the halves"}
    mid = (samples[0]["t"] + samples[-1]["t"]) / 2
    first = [s["inflight"] for s in samples if s["t"] <= mid]
    second = [s["inflight"] for s in samples if s["t"] > mid]
    a, b = sum(first) / len(first), sum(second) / len(second)
    return {
        "bounded": b <= GROWTH * a + SLACK,
        "in_system_mean_first_half": round(a, 2),
        "in_system_mean_second_half": round(b, 2),
        "in_system_max": max(s["inflight"] for s in samples),
        "rule": f"second half mean <= {GROWTH:g} x first half + {SLACK:g} (a growing queue: ~3x)",
    }


def sla_held(run: Optional[Mapping[str, Any]], alerts: Mapping[str, Any], mocker_speedup: float) -> dict[str, Any]:
    """The replay's TTFT and ITL p99 (x --speedup-ratio, back at the model's pace) against the stack's alert
    thresholds (p95 targets: recipes/platform/monitoring.yaml alerts with kimi-k3:monitoring.alerts); p99 is the
    conservative reading of a p95 target on a few hundred requests."""
    run = run or {}
    ttft = (run.get("ttft_ms") or {}).get("p99")
    itl = (run.get("itl_ms") or {}).get("p99")
    limits = {"ttft_ms": float(alerts["ttftP95Seconds"]) * 1000, "itl_ms": float(alerts["itlP95Seconds"]) * 1000}
    got = {
        "ttft_ms": None if ttft is None else round(ttft * mocker_speedup, 3),
        "itl_ms": None if itl is None else round(itl * mocker_speedup, 3),
    }
    held = None if None in got.values() else all(got[k] <= limits[k] for k in limits)
    return {"held": held, "p99_at_model_pace": got, "limits_p95": limits}


def verdict(
    config: Mapping[str, Any],
    samples: Sequence[Mapping[str, Any]],
    run: Optional[Mapping[str, Any]],
    requests: int,
    alerts: Mapping[str, Any],
    mocker_speedup: float,
) -> dict[str, Any]:
    """report.json's trace.plan_config: the config run, whether queues stayed bounded and every request was served,
    whether the SLA held; `confirmed` only when all do."""
    q, s = queues_bounded(samples), sla_held(run, alerts, mocker_speedup)
    served = int((run or {}).get("requests") or 0)
    return {
        **config,
        "requests_served": served,
        "all_served": served == requests,
        "queues": q,
        "sla": s,
        "confirmed": bool(q["bounded"] and s["held"] and served == requests),
        "caveat": CAVEAT,
    }


def for_trace(args: RehearseOptions, graph: Any, trace: Any) -> tuple[Any, dict[str, Any]]:
    """(the graph at plan --trace's config for the selection, the config); the same as `kimi-k3 plan STACK --trace
    OUT/trace.jsonl` (the selection the run replays) prints, at the replay's timing (plan_config)."""
    if trace is None:
        raise UserError("--plan-config: runs the config plan --trace computes for a trace; give it with --trace FILE")
    from kimi_k3.rehearsal.trace_sizing import graph_inputs
    from kimi_k3.sizing import trace_plan

    r = trace_plan.pd_ratio(trace.requests, **graph_inputs(graph))
    config = plan_config(r, args.trace_speedup, args.speedup_ratio)
    return apply(graph, config, args.stack), config


def run_verdict(
    config: Any, cfg: Any, sampler: Any, runs: Mapping[str, Any], trace: Any, args: RehearseOptions
) -> dict[str, Any]:
    """verdict() on what the run measured: the replay's samples, AIPerf's summary, the stack's alert thresholds."""
    from kimi_k3.k8s.monitoring import settings
    from kimi_k3.pods.workload import load_summary
    from kimi_k3.rehearsal.trace_report import active

    samples = active(sampler.samples) if sampler else []
    run = load_summary(runs["trace"]) if runs.get("trace") else None  # AIPerf's export -> requests, TTFT, ITL (ms)
    return verdict(config, samples, run, len(trace.requests), settings(cfg)[1], args.speedup_ratio)
