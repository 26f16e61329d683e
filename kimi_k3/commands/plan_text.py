"""`kimi-k3 plan`'s table: memory, cold start and cost per role and for the stack, the performance rows, the cost
against the API, and the terms they use. Wording and layout only; the figures come from kimi_k3/sizing/."""

from __future__ import annotations

from typing import Any, Optional

from kimi_k3.commands import plan_perf
from kimi_k3.commands.argtypes import model_context
from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import perf


def render_table(stack: planner.StackPlan, title: str) -> str:
    rows: list[tuple[str, ...]] = []
    for r in stack.roles:
        p, j = r.plan, r.plan.to_json()
        rows += [
            (
                f"[{r.spec.name}]",
                f"{p.gpu} TP{p.tp}{f' x PP{p.pp} (tightest stage)' if p.pp > 1 else ''} DCP{p.dcp} "
                f"x{r.spec.replicas}, util {p.gpu_memory_utilization}, "
                f"KV {p.kv_cache_dtype}, spec {p.spec_tokens}, prefix caching "
                f"{'on' if p.prefix_caching else 'off'}, block {p.block_size}",
            ),
            ("weights per GPU", f"{j['weights_gb_per_gpu'] * 1e9 / 2**30:.1f} GiB"),  # one unit: GiB
            ("activation reserve", f"{j['activation_reserve_gib']:.1f} GiB"),
            ("KV pool per GPU", f"{j['kv_pool_gib_per_gpu']:.2f} GiB"),
            ("MLA KV per token per GPU", f"{j['kv_bytes_per_token']:,.0f} B"),
            ("KDA state per request per GPU", f"{j['state_mib_per_request_per_gpu']:.1f} MiB"),
            (
                "KV cache size, vLLM's log line",
                f"{j['kv_capacity_tokens']:,} tokens (requests at max-model-len that fit x max-model-len: see terms)",
            ),
            ("longest one request can be", f"{j['kv_capacity_tokens_single_request']:,} tokens"),
            ("requests at once, per replica", "each request of:"),
            *[(f"  {int(c):,} tokens", str(n)) for c, n in j["max_concurrent_requests"].items()],
            (
                f"fits {p.max_model_len:,} tokens",
                f"{'yes' if p.fits else 'NO'} (margin {p.fit_margin_gib:+.1f} GiB; one request, prompt + output)",
            ),
            *[(f"  cold start via {b}", f"{s / 60:.1f} min") for b, s in j["load_seconds"].items()],
        ]
    cost = stack.cost_per_hour_usd
    per_mtok = stack.usd_per_million_output_tokens
    rows += [
        ("[stack]", f"{stack.gpus} GPUs on {stack.nodes} nodes = {stack.gpu_hours_per_hour} GPU-hours per hour"),
        (
            "cost per hour",
            "no price configured" if cost is None else f"${cost:,.2f} ({stack.pricing.source}, {stack.pricing.as_of})",
        ),
        *(
            [
                (
                    "  billed as",
                    f"one {stack.pricing.billed_as} of {stack.pricing.billed_instances} instances; the stack's "
                    f"{stack.nodes} cost ${stack.used_cost_per_hour_usd:,.2f}",
                )
            ]
            if cost is not None and stack.pricing.billed_instances
            else []
        ),
        (
            "$ per million output tokens",
            (
                f"${per_mtok:,.4f} ("
                + (f"the {stack.pricing.billed_as} billed whole" if stack.pricing.billed_instances else "the GPUs used")
                + ")"
            )
            if per_mtok is not None
            else ("no price configured" if cost is None else "give --output-tokens-per-second"),
        ),
        *(
            [("  only the GPUs used", f"${stack.used_usd_per_million_output_tokens:,.4f} (what `plan --sla` counts)")]
            if per_mtok is not None and stack.pricing.billed_instances
            else []
        ),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"Kimi K3 plan: {title}", *(f"{k.ljust(width)}  {v}" for k, v in rows)])


TERMS = """\
terms:
  KV pool per GPU                 GPU memory left for the KV cache and KDA state after weights and the reserve.
  KV cache size, vLLM's log line  vLLM's startup line 'GPU KV cache size: N tokens': its maximum concurrency at
                                  max-model-len times max-model-len (each request also holds its KDA state blocks,
                                  so it is a little below the longest single request). With DCP it counts the
                                  tokens of all DCP ranks together.
  longest one request can be      the context one request alone could reach with the whole pool.
  requests at once                vLLM's 'Maximum concurrency for N tokens per request': how many requests of that
                                  full context fit together in one replica (each also holds its KDA state). So
                                  '3 at 1,048,576' and a log line below 1M tokens do not contradict each other.
  fits                            weights + reserve + one request at the full context fit in GPU memory."""


def _fmt(x: Optional[float], unit: str = "", digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}{unit}"


def role_rows(name: str, est: Optional[perf.Estimate], error: Optional[str]) -> list[tuple[str, str]]:
    if est is None:
        return [("  performance", "unknown (see [performance] below)")]
    kind = "prefill" if name == "prefill" else "decode"
    c, r = est.role_metrics(True)[kind], est.role_metrics(False)[kind]
    rows = []
    for key, label, unit in (
        ("ttft_ms", "TTFT", " ms"),
        ("tpot_ms", "TPOT", " ms"),
        ("tokens_per_second_per_gpu", "tokens/s per GPU", ""),
        ("tokens_per_second_per_user", "tokens/s per user", ""),
    ):
        if c[key] is not None:
            rows.append((f"  {label}", f"{_fmt(c[key], unit)} (aiconfigurator raw {_fmt(r[key], unit)})"))
    return rows


def stack_rows(
    stack: planner.StackPlan,
    est: Optional[perf.Estimate],
    error: Optional[str],
    w: perf.Workload,
    price: Optional[perf.ApiPrice] = None,
) -> list[tuple[str, str]]:
    if est is None:
        return [("performance", error or "unknown"), ("  aiconfigurator", plan_perf.tool_status())]
    cost = stack.cost_per_hour_usd
    basis = (
        f"{stack.pricing.billed_as} billed whole" if stack.pricing and stack.pricing.billed_instances else "GPUs used"
    )
    rows = [
        (
            "[performance]",
            f"{w.describe()}, {est.concurrency} requests in flight ({est.batch} per "
            f"{'decode ' if est.layout.mode == 'disagg' else ''}worker); modelled, raw in parentheses",
        ),
        (
            "  configuration",
            f"{est.layout.speculation.describe()} (the stack's worker flags)"
            + (f": {est.speedup:.2f}x plain TPOT" if est.layout.speculation.on else ""),
        ),
        (
            "  output tokens/s (stack)",
            f"{est.stack_tokens_per_second():,.0f} (raw {est.stack_tokens_per_second(False):,.0f})",
        ),
        (
            "  prefill queue",
            f"{est.arrival_rate:.3g} req/s "
            f"({'given' if w.request_rate else 'what this many requests in flight complete'}): "
            f"utilization {est.prefill_utilization:.0%}, wait {est.prefill_wait_ms:,.0f} ms "
            f"on top of {est.ttft_service_ms:,.0f} ms TTFT when idle (M/D/1 per prefill server)",
        ),
        ("  source", f"{est.source} ({plan_perf.tool_status()})"),
    ]
    if cost is not None:
        raw_mtok = perf.usd_per_million_output_tokens(cost, est.stack_tokens_per_second(False))
        rows.append(("  $/Mtok at raw throughput", f"${raw_mtok:,.2f} ({basis})"))
    rows += [("  note", n) for n in est.notes]
    rows.append(
        (
            "  across context lengths",
            "ISL: TTFT / TPOT / tok/s per GPU (all GPUs) / tok/s per user / $ per "
            f"Mtok ({basis}; modelled; fewer requests per worker where the KV cache holds fewer)",
        )
    )
    util = min(r.spec.gpu_memory_utilization for r in stack.roles)
    context = model_context()
    for isl in aic.CONTEXTS:
        if isl + w.osl > context:  # no such request: vLLM refuses a prompt + max_tokens beyond max-model-len
            rows.append(
                (
                    f"    {isl // 1024:,}k",
                    f"ISL {isl:,} + OSL {w.osl:,} is over the model's {context:,}-token "
                    "context: no such request (the `fits` row above is one request of the whole context)",
                )
            )
            continue
        e, err = plan_perf.at_context(est, isl, w, util)
        if e is None:
            rows.append((f"    {isl // 1024:,}k", err))
            continue
        c = e.calibrated
        mtok = None if cost is None else perf.usd_per_million_output_tokens(cost, e.stack_tokens_per_second())
        load = "" if e.batch == est.batch else f"  ({e.batch} per worker)"
        rows.append(
            (
                f"    {isl // 1024:,}k",
                f"{c['ttft_ms']:,.0f} ms / {c['tpot_ms']:,.1f} ms / "
                f"{c['tokens_per_second_per_gpu']:,.1f} / {c['tokens_per_second_per_user']:,.1f} / "
                f"{'-' if mtok is None else f'${mtok:,.2f}'}{load}",
            )
        )
    rows += cost_rows(plan_perf.cost_vs_api(stack, est, w, price), w)
    return rows


def cost_rows(c: Optional[dict[str, Any]], w: perf.Workload) -> list[tuple[str, str]]:
    """The self-hosted vs API comparison, every figure with its cost basis."""
    if c is None:
        return [("[cost vs API]", "no price configured for the stack, or no performance figures")]
    load = (
        f"{c['requests_per_second']:.3g} req/s (--request-rate)"
        if w.request_rate
        else f"{c['requests_per_second']:.3g} req/s: the stack kept busy at this load (its capacity)"
    )
    rows = [
        ("[cost vs API]", f"{w.describe()}; API {c['api_model']} ({c['api_price_source']})"),
        (
            "  load",
            load
            + (
                ""
                if c["carries_the_load"]
                else f"; MORE than the {c['capacity_requests_per_second']:.3g} req/s it carries"
            ),
        ),
        (
            "  API",
            f"${c['api_usd_per_request']:,.4f} per request = ${c['api_usd_per_million_output_tokens']:,.2f} "
            "per million output tokens (its input included)",
        ),
    ]
    for basis, b in c["bases"].items():
        even = (
            f"cheaper than the API above {b['break_even_requests_per_second']:.3g} req/s "
            f"({b['break_even_utilization']:.0%} of capacity)"
            if b["break_even_reachable"]
            else f"never cheaper at this shape: break-even needs {b['break_even_requests_per_second']:.3g} req/s, "
            f"{b['break_even_utilization']:.1f}x what it carries"
        )
        rows.append(
            (
                f"  self-hosted, {plan_perf.BASIS_LABELS[basis]}",
                f"${b['usd_per_hour']:,.2f}/h: ${b['usd_per_request']:,.4f} per request = "
                f"${b['usd_per_million_output_tokens']:,.2f} per million output tokens; {even}",
            )
        )
    return rows
