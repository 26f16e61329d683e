"""The prefill:decode ratio a request trace needs (issue 21), from its arrival rate, its uncached input tokens (the
best any cache could do at the stack's block size, kimi_k3/sizing/trace_cache.py) and output tokens, and the performance
model's per-worker rates of each role (kimi_k3/sizing/perf.py: aiconfigurator's prefill and decode requests/s per worker
of a 1P:1D point, at the serving scales its own disagg rule applies). Pure: the command prints it."""

from __future__ import annotations

import math
from typing import Any, Sequence

from kimi_k3.sizing import aic_table
from kimi_k3.sizing.layout import DEFAULT_CONCURRENCY_PER_DECODE_WORKER, PerfError
from kimi_k3.sizing.trace_cache import Request, cacheable_tokens, span_seconds


def trace_load(requests: Sequence[Request], block_size: int) -> dict[str, float]:
    """Mean input, uncached input (with the best cache) and output tokens a request, and the arrival rate."""
    span = span_seconds(requests)
    if len(requests) < 2 or span <= 0:
        raise PerfError("a P:D ratio needs an arrival rate: at least two requests at different timestamps")
    n = len(requests)
    cached = cacheable_tokens(requests, block_size)
    return {
        "requests": n,
        "duration_s": round(span, 3),
        "arrival_rate_per_s": (n - 1) / span,
        "mean_input": sum(r.input_length for r in requests) / n,
        "mean_uncached_input": sum(r.input_length - c for r, c in zip(requests, cached)) / n,
        "mean_output": sum(r.output_length for r in requests) / n,
    }


def pd_ratio(
    requests: Sequence[Request],
    *,
    gpu: str,
    prefill_tp: int,
    decode_tp: int,
    block_size: int,
    decode_batch: int = DEFAULT_CONCURRENCY_PER_DECODE_WORKER,
) -> dict[str, Any]:
    """Workers of each role the trace's arrival rate needs, and their ratio. A prefill worker's rate is taken at
    the mean uncached input (the new tokens alone: cached prefixes skip that compute), a decode worker's at the
    mean output with the whole input as context."""
    load = trace_load(requests, block_size)
    isl, new, osl = (max(1, round(load[k])) for k in ("mean_input", "mean_uncached_input", "mean_output"))
    base = dict(
        mode="disagg",
        system=gpu,
        prefill_tp=prefill_tp,
        prefill_workers=1,
        decode_tp=decode_tp,
        decode_workers=1,
        osl=osl,
        decode_batch=decode_batch,
    )
    prefill_raw, prefill_src = aic_table.raw_estimate({**base, "isl": new}, live=False)
    decode_raw, decode_src = aic_table.raw_estimate({**base, "isl": isl}, live=False)
    prefill_rps = prefill_raw[aic_table.RATES[0]] * aic_table.PREFILL_SCALE
    decode_rps = decode_raw[aic_table.RATES[1]] * aic_table.DECODE_SCALE
    rate = load["arrival_rate_per_s"]
    p_need, d_need = rate / prefill_rps, rate / decode_rps
    p_gpus, d_gpus = p_need * prefill_tp, d_need * decode_tp
    return {
        **{k: round(v, 3) for k, v in load.items()},
        "prefill_requests_per_second_per_worker": round(prefill_rps, 4),
        "decode_requests_per_second_per_worker": round(decode_rps, 4),
        "prefill_workers_needed": round(p_need, 3),
        "decode_workers_needed": round(d_need, 3),
        "decode_per_prefill": round(d_need / p_need, 3),
        "prefill_gpu_share": round(p_gpus / (p_gpus + d_gpus), 4),
        "workers": {"prefill": max(1, math.ceil(p_need)), "decode": max(1, math.ceil(d_need))},
        "prefill_tp": prefill_tp,
        "decode_tp": decode_tp,
        "gpu": gpu,
        "decode_batch": decode_batch,
        "block_size": block_size,
        "source": {"prefill": prefill_src, "decode": decode_src},
    }


def render(r: dict[str, Any], path: str, stack: str, mode: str) -> str:
    lines = [
        f"trace {path}: {r['requests']:,} requests over {r['duration_s']:,.1f} s ({r['arrival_rate_per_s']:.3g} "
        f"req/s); mean input {r['mean_input']:,.0f} tokens, uncached {r['mean_uncached_input']:,.0f} with the best "
        f"cache at block size {r['block_size']}, output {r['mean_output']:,.0f}",
        f"per worker (performance model): prefill {r['prefill_requests_per_second_per_worker']:.3g} req/s "
        f"(TP{r['prefill_tp']}, {r['mean_uncached_input']:,.0f} new tokens), decode "
        f"{r['decode_requests_per_second_per_worker']:.3g} req/s (TP{r['decode_tp']}, batch {r['decode_batch']})",
        f"needed at this rate: {r['prefill_workers_needed']:.2f} prefill + {r['decode_workers_needed']:.2f} decode "
        f"workers -> P:D 1:{r['decode_per_prefill']:.2f}, prefill {100 * r['prefill_gpu_share']:.0f}% of the GPUs; "
        f"deploy {r['workers']['prefill']} prefill + {r['workers']['decode']} decode "
        "(kimi-k3:roles prefill.replicas / decode.replicas)",
    ]
    if mode == "agg":
        lines.append(f"{stack} is aggregated: this is the disaggregated split of the same TP for this traffic")
    return "\n".join(lines) + "\n"
