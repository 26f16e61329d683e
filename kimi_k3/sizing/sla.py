"""perf.py -> sla.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing.exclusions import Exclusions
from kimi_k3.sizing.layout import PLAIN, Layout, PerfError, Speculation, Workload, candidate_layouts
from kimi_k3.sizing.perf import Estimate, estimate, usd_per_million_output_tokens


@dataclass(frozen=True)
class Candidate:
    estimate: Estimate
    units: int  # copies of the layout needed for the request rate
    gpus: int
    nodes: int
    cost_per_hour_usd: float  # the GPUs this layout uses, at the platform's $/GPU-hour (not a whole block)
    usd_per_million_output_tokens: float
    ours: str = ""  # the stack that deploys this shape, if any

    def to_json(self) -> dict[str, Any]:
        e, L = self.estimate, self.estimate.layout
        return {
            "layout": L.describe(),
            "gpu": L.gpu,
            "mode": L.mode,
            "tp": L.tp,
            "replicas": L.replicas * self.units,
            "prefill_tp": L.prefill_tp or None,
            "prefill_replicas": L.prefill_replicas * self.units or None,
            "pd_ratio": f"{L.prefill_replicas}:{L.replicas}" if L.mode == "disagg" else None,
            "speculation": L.speculation.describe(),
            "batch_per_worker": e.batch,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "cost_basis": "gpus_used",
            "cost_per_hour_usd": round(self.cost_per_hour_usd, 2),
            "usd_per_million_output_tokens": round(self.usd_per_million_output_tokens, 4),
            **{k: round(v, 3) for k, v in e.calibrated.items()},
            "ttft_service_ms": round(e.ttft_service_ms, 3),
            "prefill_wait_ms": round(e.prefill_wait_ms, 3),
            "prefill_utilization": round(e.prefill_utilization, 4),
            "raw": {k: round(v, 3) for k, v in e.raw.items()},
            "source": e.source,
            "ours": self.ours or None,
        }


MAX_UNITS_FACTOR = 4  # --request-rate: copies tried beyond the throughput minimum, for the prefill queue


def sla_search(
    ttft_ms: float,
    tpot_ms: float,
    workload: Workload,
    gpu_hour_usd_by_platform: dict[str, float],
    gpus_per_node: dict[str, int],
    ours: dict[Layout, str] | None = None,
    gpu_memory_utilization: float = 0.9,
    speculation: Speculation = PLAIN,
    exclusions: Optional[Exclusions] = None,
) -> list[Candidate]:
    """Every layout x load on the grid that meets TTFT and TPOT (modelled), cheapest $/Mtok first.

    With a request rate, each layout is replicated until it carries it and its prefill queue (M/D/1, see
    queueing()) keeps TTFT within the limit; the ranking is then by $/hour. `ours` maps the stacks' unit layouts
    to stack names so the answer can mark them; `exclusions` collects why every other point was left out.
    """
    ours = {k.unit()[0]: v for k, v in (ours or {}).items()}
    why = exclusions if exclusions is not None else Exclusions()
    found = []
    for layout in candidate_layouts(speculation):
        if layout.gpu not in gpu_hour_usd_by_platform:
            continue
        for batch in aic.BATCHES:
            base = Workload(
                workload.isl, workload.osl, concurrency=batch * layout.replicas, cache_hit_rate=workload.cache_hit_rate
            )
            try:  # table only (interpolated off the grid): the answer must come in seconds
                e = estimate(layout, base, gpu_memory_utilization=gpu_memory_utilization, live=False)
            except PerfError as err:
                why.add("no_answer", reason=str(err))
                continue
            if not e.kv_fits:
                why.add("kv")
                continue
            if e.calibrated["tpot_ms"] > tpot_ms:
                why.add("tpot", e.calibrated["tpot_ms"])
                continue
            units = 1
            if workload.request_rate:
                need = max(1, math.ceil(workload.request_rate / e.requests_per_second_capacity))
                for units in range(need, need * MAX_UNITS_FACTOR + 1):
                    w = Workload(
                        workload.isl,
                        workload.osl,
                        concurrency=batch * layout.replicas,
                        request_rate=workload.request_rate / units,
                        cache_hit_rate=workload.cache_hit_rate,
                    )
                    e = estimate(layout, w, gpu_memory_utilization=gpu_memory_utilization, live=False)
                    if e.calibrated["ttft_ms"] <= ttft_ms:
                        break
                else:
                    why.add("rate" if e.prefill_utilization >= 1 else "ttft", e.calibrated["ttft_ms"])
                    continue
            if e.calibrated["ttft_ms"] > ttft_ms:
                why.add("ttft", e.calibrated["ttft_ms"])
                continue
            tps = e.stack_tokens_per_second()
            gpus = layout.gpus * units
            cost = gpus * gpu_hour_usd_by_platform[layout.gpu]
            found.append(
                Candidate(
                    e,
                    units,
                    gpus,
                    gpus // gpus_per_node[layout.gpu],
                    cost,
                    usd_per_million_output_tokens(cost, tps * units),
                    ours.get(layout, ""),
                )
            )
    key = (
        (lambda c: (c.cost_per_hour_usd, c.usd_per_million_output_tokens))
        if workload.request_rate
        else (lambda c: (c.usd_per_million_output_tokens, c.cost_per_hour_usd))
    )
    return sorted(found, key=key)


def stack_config_for(candidate: Candidate) -> dict[str, Any]:
    """The Pulumi stack config (kimi-k3:* keys) that deploys `candidate` from one of our recipes."""
    L, units = candidate.estimate.layout, candidate.units
    recipe = f"{L.gpu}-disagg" if L.mode == "disagg" else L.gpu
    cfg: dict[str, Any] = {"kimi-k3:recipe": recipe}
    if L.mode == "agg":
        cfg["kimi-k3:serving"] = {"roles": {"decode": {"tp": L.tp, "replicas": L.replicas * units}}}
    else:
        cfg["kimi-k3:serving"] = {
            "pdRatio": f"{L.prefill_replicas * units}:{L.replicas * units}",
            "roles": {"prefill": {"tp": L.prefill_tp}, "decode": {"tp": L.tp}},
        }
    return cfg
