"""`kimi-k3 plan --json`: the `performance` block and the per-role keys, with stable names."""

from __future__ import annotations

from typing import Any, Optional

from kimi_k3.commands import plan_perf
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import perf


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
        return {"error": error, "tool": plan_perf.tool_status()}
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
        "tool": plan_perf.tool_status(),
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
        "cost_vs_api": plan_perf.cost_vs_api(stack, est, w, price),
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
