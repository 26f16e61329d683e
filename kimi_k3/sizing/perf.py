"""Performance model: TTFT, TPOT, tokens/s per GPU and per user and $/Mtok of a layout under a workload.

Pure: aiconfigurator's raw figures (kimi_k3/sizing/aic_table.py, from recipes/facts/perf-raw.yaml), calibrated against the
public measurements (kimi_k3/sizing/calibration.py), with prefix-cache hits, speculation and prefill queueing in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing.aic_table import METRICS, PREFILL_SCALE, RATES, raw_estimate
from kimi_k3.sizing.calibration import calibrated_metrics, calibration
from kimi_k3.sizing.layout import DEFAULT_CONCURRENCY_PER_DECODE_WORKER, DEFAULT_OSL, Layout, PerfError, Workload

# isort: split
# Names kimi_k3/commands/plan_perf.py and kimi_k3/rehearsal/ still read as perf.X (both being changed in parallel
# branches): once they import them from the modules named here, this block goes.
from kimi_k3.sizing.api_cost import API_PRICE_KEYS as API_PRICE_KEYS
from kimi_k3.sizing.api_cost import ApiPrice as ApiPrice
from kimi_k3.sizing.api_cost import api_prices as api_prices
from kimi_k3.sizing.api_cost import cost_vs_api as cost_vs_api
from kimi_k3.sizing.calibration import calibration_report as calibration_report
from kimi_k3.sizing.calibration import held_out_errors as held_out_errors
from kimi_k3.sizing.exclusions import Exclusions as Exclusions
from kimi_k3.sizing.layout import DEFAULT_ISL as DEFAULT_ISL
from kimi_k3.sizing.layout import PLAIN as PLAIN
from kimi_k3.sizing.layout import RoleLayout as RoleLayout
from kimi_k3.sizing.layout import Speculation as Speculation
from kimi_k3.sizing.layout import candidate_layouts as candidate_layouts
from kimi_k3.sizing.layout import speculation_from_config as speculation_from_config
from kimi_k3.sizing.memory import memory_comparison as memory_comparison


@dataclass(frozen=True)
class Estimate:
    layout: Layout
    workload: Workload
    batch: int  # requests in flight per decoding (or aggregated) worker
    raw: dict[str, float]
    calibrated: dict[str, float]  # the model: prefix-cache hits, speculation and prefill queueing in
    source: str  # aiconfigurator | interpolated | ...
    kv_fits: bool
    kv_capacity_per_worker: int  # concurrent requests at isl+osl the planner gives one worker
    notes: tuple[str, ...] = field(default_factory=tuple)
    ttft_service_ms: float = 0.0  # TTFT of a request that finds the prefill stage idle (cache hits counted)
    prefill_wait_ms: float = 0.0  # M/D/1 wait at a prefill server (see queueing())
    prefill_utilization: float = 0.0  # arrival rate x service time per prefill server
    arrival_rate: float = 0.0  # requests/s the queueing term used (given, or the closed loop's)
    speedup: float = 1.0  # speculative decoding's TPOT gain over plain decoding

    @property
    def concurrency(self) -> int:
        return self.batch * self.layout.replicas

    @property
    def requests_per_second_capacity(self) -> float:
        """Requests/s the layout completes at this load (its output tokens/s over OSL)."""
        return self.stack_tokens_per_second() / self.workload.osl

    def stack_tokens_per_second(self, calibrated: bool = True) -> float:
        """Output tokens/s of the whole layout (per-GPU figure x all GPUs)."""
        m = self.calibrated if calibrated else self.raw
        return m["tokens_per_second_per_gpu"] * self.layout.gpus

    def role_metrics(self, calibrated: bool = True) -> dict[str, dict[str, Optional[float]]]:
        """Per role: what its part of a request costs and how much it carries (stable JSON keys)."""
        m = self.calibrated if calibrated else self.raw
        L, tps = self.layout, self.stack_tokens_per_second(calibrated)
        r = lambda x: None if x is None else round(x, 3)  # noqa: E731
        if L.mode == "agg":
            return {
                "decode": {
                    "ttft_ms": r(m["ttft_ms"]),
                    "tpot_ms": r(m["tpot_ms"]),
                    "tokens_per_second_per_gpu": r(m["tokens_per_second_per_gpu"]),
                    "tokens_per_second_per_user": r(m["tokens_per_second_per_user"]),
                }
            }
        requests_per_second = tps / self.workload.osl
        return {
            # prefill: its latency is the TTFT; it produces one token per request and reads ISL tokens.
            "prefill": {
                "ttft_ms": r(m["ttft_ms"]),
                "tpot_ms": None,
                "tokens_per_second_per_gpu": r(
                    requests_per_second * self.workload.isl / (L.prefill_tp * L.prefill_replicas)
                ),
                "tokens_per_second_per_user": None,
            },
            "decode": {
                "ttft_ms": None,
                "tpot_ms": r(m["tpot_ms"]),
                "tokens_per_second_per_gpu": r(tps / (L.tp * L.replicas)),
                "tokens_per_second_per_user": r(m["tokens_per_second_per_user"]),
            },
        }


def _kv_capacity(gpu: str, tp: int, context: int, gpu_memory_utilization: float, dcp: int = 1) -> int:
    from kimi_k3.sizing import memory

    # Workers as the recipes run them: --enable-prefix-caching (vLLM's "align" KDA state, 1536-token blocks at TP8).
    return memory.plan_role(
        gpu,
        tp,
        dcp=dcp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max(context, 1),
        prefix_caching=True,
    ).max_concurrent_requests(context)


def queueing(
    arrival_rate: float, service_ms: float, servers: int, in_flight: Optional[int] = None
) -> tuple[float, float]:
    """Wait at the prefill stage, as a model: each of `servers` prefill servers (prefill workers, or aggregated
    workers, which prefill one request at a time between decode steps) is an M/D/1 queue: Poisson arrivals
    split evenly, a deterministic service time (one request's prefill at its ISL), first come first served.
    Wq = rho * S / (2 * (1 - rho)), rho = lambda * S per server. With a fixed number of requests in flight
    (closed loop) no more than in_flight / servers - 1 can be ahead of one, which bounds the wait.
    Returns (wait ms, rho); rho >= 1 means the queue grows without bound (wait = inf, open loop). In a closed
    loop estimate() also takes Little's law's wait where the prefill stage is the bottleneck."""
    s = service_ms / 1000
    rho = arrival_rate / servers * s
    bound = math.inf if in_flight is None else max(0.0, in_flight / servers - 1) * service_ms
    if rho >= 1:
        return bound, rho
    return min(rho * s / (2 * (1 - rho)) * 1000, bound), rho


def _ttft_raw_with_hits(point: dict[str, Any], hit: float) -> float:
    """Raw prefill time when a share `hit` of the input is a prefix-cache hit: only the new tokens are computed.
    Prefilling tokens h*ISL..ISL after a cached prefix costs what a whole prefill of ISL costs minus one of
    h*ISL (causal attention: the prefix's work is the same either way), and never less than prefilling the
    new tokens alone; the table's TTFT at the shorter contexts gives both."""
    full, _ = raw_estimate(point, live=False)
    if hit <= 0:
        return full["ttft_ms"]
    isl = point["isl"]
    cached = max(1, round(isl * hit))
    new = max(1, isl - cached)
    prefix, _ = raw_estimate({**point, "isl": cached}, live=False)
    alone, _ = raw_estimate({**point, "isl": new}, live=False)
    return max(full["ttft_ms"] - prefix["ttft_ms"], alone["ttft_ms"])


def estimate(
    layout: Layout, workload: Workload, *, gpu_memory_utilization: float = 0.9, dcp: int = 1, live: bool = True
) -> Estimate:
    """Raw and modelled performance of `layout` under `workload` (concurrency spread over decoding workers)."""
    if workload.isl < 1 or workload.osl < 1:
        raise PerfError("ISL and OSL must be >= 1")
    if not 0 <= workload.cache_hit_rate < 1:
        raise PerfError(f"cache hit rate {workload.cache_hit_rate:g} is outside [0, 1)")
    concurrency = workload.concurrency or DEFAULT_CONCURRENCY_PER_DECODE_WORKER * layout.replicas
    batch = max(1, round(concurrency / layout.replicas))
    point = layout.point(workload.isl, workload.osl, batch)
    raw, source = raw_estimate(point, live=live)
    cal_params = calibration()
    ttft_raw = _ttft_raw_with_hits(point, workload.cache_hit_rate) if workload.cache_hit_rate else raw["ttft_ms"]
    cal = calibrated_metrics(cal_params, point, raw, layout.speculation, ttft_raw)
    unit, units = layout.unit()
    # Queueing at the prefill stage: the given arrival rate (open loop), or the rate this many requests in
    # flight complete at (closed loop).
    rate = workload.request_rate or cal["tokens_per_second"] * units / workload.osl
    servers = layout.prefill_replicas if layout.mode == "disagg" else layout.replicas
    # A server's time per request: an aggregated worker's prefill of one request alone (its TTFT at batch 1;
    # at batch b aiconfigurator's TTFT also holds the decode steps interleaved with it), or a prefill worker's
    # 1 / its request rate (its disaggregated TTFT also counts the KV hand-off, which does not block it).
    if layout.mode == "agg":
        one = {**point, "batch": 1}
        service = (
            _ttft_raw_with_hits(one, workload.cache_hit_rate)
            if workload.cache_hit_rate
            else raw_estimate(one, live=live)[0]["ttft_ms"]
        ) * cal_params.ttft(1)
    else:
        service = 1000 / (cal[RATES[0]] * PREFILL_SCALE)
    wait, rho = queueing(rate, service, servers, None if workload.request_rate else concurrency)
    if not workload.request_rate:  # closed loop: Little's law, N = rate x (TTFT + OSL x TPOT), holds exactly
        residual = (concurrency / rate - (cal["ttft_ms"] + workload.osl * cal["tpot_ms"]) / 1000) * 1000
        wait = max(wait if rho < 1 else 0.0, residual)
    cal["ttft_ms"] += wait
    capacity = _kv_capacity(layout.gpu, layout.tp, workload.isl + workload.osl, gpu_memory_utilization, dcp)
    notes = []
    if batch > capacity:
        notes.append(
            f"{batch} requests of {workload.isl + workload.osl:,} tokens per worker exceed the KV cache "
            f"({capacity} fit on TP{layout.tp} {layout.gpu}): vLLM would queue the rest"
        )
    if concurrency % layout.replicas:
        notes.append(f"concurrency {concurrency} is not a multiple of {layout.replicas} workers; modelled {batch} each")
    if rho >= 1 and workload.request_rate:
        notes.append(
            f"{rate:.3g} req/s load the prefill stage to {rho:.0%} of what it serves: the queue grows without bound"
        )
    return Estimate(
        layout,
        workload,
        batch,
        {m: raw[m] for m in METRICS},
        {m: cal[m] for m in METRICS},
        source,
        batch <= capacity,
        capacity,
        tuple(notes),
        ttft_service_ms=cal["ttft_ms"] - wait,
        prefill_wait_ms=wait,
        prefill_utilization=rho,
        arrival_rate=rate,
        speedup=cal_params.speedup(point, layout.speculation),
    )


def gpu_hour_usd(pricing: Any) -> float:
    return pricing.instance_hour_usd / pricing.gpus_per_instance


def usd_per_million_output_tokens(cost_per_hour: float, tokens_per_second: float) -> Optional[float]:
    if not tokens_per_second:
        return None
    return cost_per_hour / (tokens_per_second * 3600) * 1e6


def curves(
    layout: Layout,
    *,
    osl: int = DEFAULT_OSL,
    gpu_memory_utilization: float = 0.9,
    cost_per_hour: Optional[float] = None,
) -> list[dict[str, Any]]:
    """The layout across context lengths (8k..1M) and load (batch per worker): the plan's curves and Pareto."""
    out = []
    for isl in aic.CONTEXTS:
        for batch in aic.BATCHES:
            w = Workload(isl=isl, osl=osl, concurrency=batch * layout.replicas)
            try:
                e = estimate(layout, w, gpu_memory_utilization=gpu_memory_utilization, live=False)
            except PerfError as err:
                out.append({"isl": isl, "batch_per_worker": batch, "error": str(err)})
                continue
            tps = e.stack_tokens_per_second()
            out.append(
                {
                    "isl": isl,
                    "batch_per_worker": batch,
                    "concurrency": e.concurrency,
                    "kv_fits": e.kv_fits,
                    **{k: round(v, 3) for k, v in e.calibrated.items() if k != "tokens_per_second"},
                    "raw": {k: round(v, 3) for k, v in e.raw.items() if k != "tokens_per_second"},
                    "usd_per_million_output_tokens": None
                    if cost_per_hour is None
                    else round(usd_per_million_output_tokens(cost_per_hour, tps), 4),
                }
            )
    return out
