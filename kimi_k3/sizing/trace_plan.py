"""The prefill:decode ratio a request trace needs (issue 21), from its arrival rate, its uncached input tokens (the
best any cache could do at the stack's block size, kimi_k3/sizing/trace_cache.py) and output tokens, and each role's
per-worker rate from the timing tables the rehearsal's mockers step by (kimi_k3/sizing/mocker.py). Pure."""

from __future__ import annotations

import heapq
import math
from typing import Any, Optional, Sequence

from kimi_k3.sizing import mocker
from kimi_k3.sizing.layout import DEFAULT_CONCURRENCY_PER_DECODE_WORKER, PerfError
from kimi_k3.sizing.trace_cache import Request, cacheable_tokens, span_seconds

TIMING_SOURCE = (
    "prefill: the rehearsal's mocker table read as dynamo.mocker 1.6.1 does, one read per step of at most the "
    "prefill role's --max-num-batched-tokens; decode: the calibrated model that table "
    "samples (kimi_k3/sizing/mocker.py model_itl_ms; the table reads slower below ~23k context, docs/traces.md)"
)


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


def prefill_seconds(
    requests: Sequence[Request], block_size: int, profile: dict[str, Any], token_budget: Optional[int] = None
) -> list[float]:
    """Each request's prefill alone on a worker: its uncached tokens (with the best cache) in steps of at most
    `token_budget` (--max-num-batched-tokens; None: one step), each step read from the mocker table."""
    cached = cacheable_tokens(requests, block_size)
    return [chunked_prefill_ms(profile, r.input_length - c, token_budget) / 1000 for r, c in zip(requests, cached)]


def chunked_prefill_ms(profile: dict[str, Any], new_tokens: int, token_budget: Optional[int]) -> float:
    """dynamo.mocker's vLLM scheduler gives a prompt at most the step's token budget per step and times each step
    by its own new tokens (perf_model.rs predict_prefill_time: batch x (isl - prefix))."""
    if not token_budget or new_tokens <= token_budget:
        return mocker.prefill_ms(profile, new_tokens)
    whole, rest = divmod(new_tokens, token_budget)
    return whole * mocker.prefill_ms(profile, token_budget) + mocker.prefill_ms(profile, rest)


def fcfs_departures(arrivals: Sequence[float], service: Sequence[float], servers: int) -> list[float]:
    """When each request leaves one first-come-first-served queue over `servers` workers, each serving one request
    at a time, at these arrival times (seconds, sorted)."""
    free = [0.0] * servers
    out = []
    for a, s in zip(arrivals, service):
        end = max(a, heapq.heappop(free)) + s
        heapq.heappush(free, end)
        out.append(end)
    return out


def fcfs_busy(arrivals: Sequence[float], service: Sequence[float], servers: int) -> float:
    """Request-seconds in the system (waiting + served) of that queue (fcfs_departures)."""
    return sum(d - a for a, d in zip(arrivals, fcfs_departures(arrivals, service, servers)))


def pd_ratio(
    requests: Sequence[Request],
    *,
    gpu: str,
    prefill_tp: int,
    decode_tp: int,
    block_size: int,
    decode_batch: int = DEFAULT_CONCURRENCY_PER_DECODE_WORKER,
    max_num_seqs: Optional[int] = None,
    prefill_token_budget: Optional[int] = None,
) -> dict[str, Any]:
    """Workers of each role the trace's arrival rate needs, and their ratio, timed by the tables the rehearsal hands
    its mockers (kimi_k3/sizing/mocker.py: the calibrated performance model) read as dynamo.mocker reads them, so
    `rehearse --trace` measures this model on the real runtime. A prefill worker serves one request at a time, each
    for its uncached tokens (cached prefixes skip that compute), read from the prefill table; a decode worker
    `decode_batch` at once, each step at the mean context (input + half the output), from the model the decode table
    samples (mocker.model_itl_ms says why not the table's reading). `in_flight_alone`: requests in each role on average (Little's
    law) when each runs alone, what a light replay measures."""
    load = trace_load(requests, block_size)
    profile = mocker.disagg_profile(gpu, prefill_tp, decode_tp, max_num_seqs)
    n, rate = len(requests), load["arrival_rate_per_s"]
    prefill_s = sum(prefill_seconds(requests, block_size, profile, prefill_token_budget)) / n
    ctx = load["mean_input"] + load["mean_output"] / 2
    itl_s = mocker.model_itl_ms(gpu, prefill_tp, decode_tp, ctx, decode_batch, max_num_seqs) / 1000
    prefill_rps, decode_rps = 1 / prefill_s, decode_batch / (load["mean_output"] * itl_s)
    alone_s = (
        sum(
            r.output_length * mocker.decode_itl_ms(profile, c, c) / 1000
            for r in requests
            for c in [r.input_length + r.output_length / 2]
        )
        / n
    )
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
        "in_flight_alone": {"prefill": round(rate * prefill_s, 4), "decode": round(rate * alone_s, 4)},
        "prefill_tp": prefill_tp,
        "decode_tp": decode_tp,
        "gpu": gpu,
        "decode_batch": decode_batch,
        "block_size": block_size,
        "prefill_token_budget": prefill_token_budget,
        "source": TIMING_SOURCE,
    }


def render(r: dict[str, Any], path: str, stack: str, mode: str) -> str:
    lines = [
        f"trace {path}: {r['requests']:,} requests over {r['duration_s']:,.1f} s ({r['arrival_rate_per_s']:.3g} "
        f"req/s); mean input {r['mean_input']:,.0f} tokens, uncached {r['mean_uncached_input']:,.0f} with the best "
        f"cache at block size {r['block_size']}, output {r['mean_output']:,.0f}",
        f"per worker (prefill: the mockers' table; decode: the calibrated model it samples): prefill {r['prefill_requests_per_second_per_worker']:.3g} req/s "
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
