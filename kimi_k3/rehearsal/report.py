"""plan.py -> report.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from kimi_k3.pods import workload
from kimi_k3.rehearsal.metrics import HIT_SOURCE, endpoint_component
from kimi_k3.rehearsal.plan import Rehearsal

# The stable `load` block from AIPerf's profile_export_aiperf.json: the same summary the benchmark Job logs.
percentiles = workload.percentiles


aiperf_load = workload.load_summary


def build_report(
    rehearsal: Rehearsal,
    *,
    ready_seconds: Optional[float],
    registered: Mapping[str, int],
    smoke: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    kv_hit: Optional[float],
    worker_load: Mapping[str, float],
    failure: Optional[str] = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """report.json: the issue's stable keys first (stack, ready_seconds, workers, smoke, load, kv_hit_rate)."""
    main_run = runs.get("agentic") or next(iter(runs.values()), None)
    load = aiperf_load(main_run)
    by_mode: dict[str, float] = {}
    for role in rehearsal.roles:
        by_mode[role.mode] = by_mode.get(role.mode, 0.0) + sum(
            v for k, v in worker_load.items() if k.startswith(role.key + "-")
        )
    report: dict[str, Any] = {
        "stack": rehearsal.stack,
        "ready_seconds": None if ready_seconds is None else round(ready_seconds, 2),
        "workers": [
            {"role": r.key, "replicas": r.replicas, "registered": int(registered.get(endpoint_component(r.mode), 0))}
            for r in rehearsal.roles
        ],
        "smoke": {"passed": bool(smoke.get("passed")), "checks": dict(smoke.get("checks") or {})},
        "load": load,
        "kv_hit_rate": kv_hit,
        "kv_hit_rate_source": HIT_SOURCE[rehearsal.cache_evidence],
        # Beyond the stable keys: detail for people and plots.
        "runs": {name: aiperf_load(s) for name, s in runs.items()},
        "worker_requests": {k: int(v) for k, v in sorted(worker_load.items())},
        "prefill_decode_requests": (
            {"prefill": int(by_mode.get("prefill", 0)), "decode": int(by_mode.get("decode", 0))}
            if "prefill" in by_mode
            else None
        ),
        "roles": {
            r.key: {
                "component": r.component,
                "mode": r.mode,
                "replicas": r.replicas,
                "kv_capacity_tokens": r.capacity.tokens,
                "kv_bytes_per_token": r.capacity.bytes_per_token,
                "num_gpu_blocks": r.capacity.num_blocks,
                "mocker_args": list(r.args),
            }
            for r in rehearsal.roles
        },
        "block_size": rehearsal.block_size,
        "max_model_len": rehearsal.max_model_len,
        "smoke_failures": dict(smoke.get("failures") or {}),
        "failure": failure,
        "tokenizer": "rehearsal fixture (kimi_k3/rehearsal/fixture.py), not Kimi K3's: token counts are the fixture's",
    }
    report.update(extra or {})
    return report


def _fmt(v: Any, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.1f}{unit}" if isinstance(v, float) else f"{v}{unit}"


def render_markdown(report: Mapping[str, Any], plots: Iterable[str] = ()) -> str:
    ok = report["failure"] is None and report["smoke"]["passed"]
    lines = [f"# Rehearsal of `{report['stack']}`: {'passed' if ok else 'FAILED'}", ""]
    if report["failure"]:
        lines += [f"**Failed:** {report['failure']}", ""]
    lines += [
        "The real Dynamo frontend and KV router served this stack's graph on 127.0.0.1, with one simulated engine "
        "(`dynamo.mocker`) per worker replica, sized by the planner. "
        + (
            "Each mocker's step timing is the calibrated performance model of this layout on its GPUs (`kimi-k3 plan` "
            "numbers, fed as the mocker's profile data), so latencies approximate GB200/GB300 for the fixture's prompt "
            "lengths. "
            if report.get("timing") == "perf model"
            else "Latencies are the mocker's own timing model on this machine, not GB200/GB300 numbers. "
        )
        + "Token counts come from the rehearsal's small fixture tokenizer, not Kimi K3's.",
        "",
        f"- graph ready in **{_fmt(report['ready_seconds'], ' s')}** (block size {report['block_size']}, "
        f"context {report['max_model_len']:,} tokens)",
        f"- KV cache hit rate during the load ({report.get('kv_hit_rate_source') or HIT_SOURCE['usage']}): **"
        + ("-" if report["kv_hit_rate"] is None else f"{100 * report['kv_hit_rate']:.1f}%")
        + "**",
        "",
        "| role | replicas | registered | KV capacity (tokens) | blocks | KV bytes/token | requests handled |",
        "|---|---|---|---|---|---|---|",
    ]
    t = report.get("trace")
    if t:
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
        lines[-3:-3] = [
            f"- trace `{t['file']}`: {t['requests']:,} requests over {t['duration_s']:,.1f} s, replayed in "
            f"{t['replay_seconds']:,.1f} s (speedup {t['speedup']:g}); input tokens p50/p90/p99 "
            f"{t['isl']['p50']:,.0f} / {t['isl']['p90']:,.0f} / {t['isl']['p99']:,.0f}, output "
            f"{t['osl']['p50']:,.0f} / {t['osl']['p90']:,.0f} / {t['osl']['p99']:,.0f}",
            f"- KV hit rate achieved **{pct(t['achieved_hit_rate'])}** vs the best any cache could reach on this "
            f"trace at block size {t['block_size']} (its prefix hashes alone) **{pct(t['best_hit_rate'])}**",
        ]
    for w in report["workers"]:
        r = report["roles"][w["role"]]
        handled = sum(v for k, v in report["worker_requests"].items() if k.startswith(w["role"] + "-"))
        lines.append(
            f"| {w['role']} ({r['mode']}) | {w['replicas']} | {w['registered']} | {r['kv_capacity_tokens']:,} "
            f"| {r['num_gpu_blocks']:,} | {r['kv_bytes_per_token']:,} | {handled} |"
        )
    lines += ["", "## Smoke test", "", "| check | result |", "|---|---|"]
    for name, passed in report["smoke"]["checks"].items():
        why = report["smoke_failures"].get(name, "")
        lines.append(f"| {name} | {'ok' if passed else 'FAILED ' + why} |")
    lines += [
        "",
        "## Load (AIPerf)",
        "",
        "| run | requests | TTFT p50/p90/p99 ms | ITL p50/p90/p99 ms | output tok/s |",
        "|---|---|---|---|---|",
    ]
    for name, run in report["runs"].items():
        ttft, i = run["ttft_ms"], run["itl_ms"]  # not `t`: that is the trace section, rendered below
        lines.append(
            f"| {name} | {run['requests']} | {_fmt(ttft['p50'])} / {_fmt(ttft['p90'])} / {_fmt(ttft['p99'])} | "
            f"{_fmt(i['p50'])} / {_fmt(i['p90'])} / {_fmt(i['p99'])} | {_fmt(run['output_tokens_per_second'])} |"
        )
    if report.get("prefill_decode_requests"):
        pd = report["prefill_decode_requests"]
        lines += ["", f"Prefill/decode balance: {pd['prefill']} prefill requests, {pd['decode']} decode requests."]
    if t:
        from kimi_k3.rehearsal import trace_sections

        lines += trace_sections.markdown(t)
    for p in plots:
        lines += ["", f"![{p}]({p})"]
    return "\n".join(lines) + "\n"


def format_seconds(s: float) -> str:
    return f"{s:.1f}s" if s < 60 else f"{int(s // 60)}m{math.floor(s % 60):02d}s"


def summary(report: Mapping[str, Any], out: Path, say: Callable[[str], None]) -> None:
    """The console's last line: what report.md says, in the same units."""
    load, fmt = report["load"], _fmt
    t, hit = load["ttft_ms"], report["kv_hit_rate"]
    say(
        f"{report['stack']}: ready {fmt(report['ready_seconds'], ' s')}, smoke "
        f"{'passed' if report['smoke']['passed'] else 'FAILED'}"
        + (
            f", TTFT p50/p90/p99 {fmt(t['p50'])}/{fmt(t['p90'])}/{fmt(t['p99'])} ms, "
            f"ITL p50 {fmt(load['itl_ms']['p50'])} ms, {fmt(load['output_tokens_per_second'])} output tok/s, "
            f"KV hit rate {'-' if hit is None else f'{100 * hit:.1f}%'}"
            if load["requests"]
            else ""
        )
        + (f", FAILED: {report['failure']}" if report["failure"] else "")
        + f" -> {out}/report.md"
    )
