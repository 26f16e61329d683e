"""The AIPerf workload: one definition for `kimi-k3 rehearse` (AIPerf against the local frontend) and the optional
in-cluster benchmark Job (`kimi-k3:serving.benchmark`, AIPerf against the frontend Service), and that Job's runner.

Standard library only: the Job mounts this file from a ConfigMap into the AIPerf image and runs
`python workload.py --plan FILE`, which runs every `aiperf profile` of the plan in turn and prints each run's
summary. Exit 0 when every run completes with its export, 1 when one does not (the failed run is named in the
container's termination message), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

# The two runs: `agentic` is the traffic Kimi K3 is deployed for (multi-turn conversations sharing a long system
# prompt, growing their context with tool-output-like text); `synthetic` is a plain single-turn baseline.
RUNS = ("agentic", "synthetic")
RANDOM_SEED = 7
AGENTIC_ISL, SYNTHETIC_ISL, OSL = 512, 1024, 64     # tokens per turn (input) and per reply (output)
AGENTIC_CORPUS = "coding"                          # AIPerf's --prompt-corpus closest to tool output
# Beyond --benchmark-duration, what one run may take: process start, tokenizer load, dataset generation, draining
# the requests in flight, exports (the local rehearsal's measured runs take 10-40 s of it on 2 cores).
RUN_GRACE_SECONDS = 180
# The flags whose values depend on where AIPerf runs (which frontend, which tokenizer, where results go): the
# rest of an `aiperf profile` command line is the workload, identical locally and in the cluster.
PLACE_FLAGS = ("--model", "--url", "--tokenizer", "--artifact-dir")
RESULT_FILE = "profile_export_aiperf.json"         # AIPerf's JSON export in --artifact-dir


@dataclass(frozen=True)
class Workload:
    """Bounded in requests (per run) and in time (per run, `duration_seconds` + RUN_GRACE_SECONDS)."""

    requests: int = 32
    duration_seconds: float = 90
    concurrency: int = 4
    system_prompt_tokens: int = 4096
    turns: int = 4
    runs: tuple[str, ...] = field(default=RUNS)

    def run_deadline_seconds(self) -> float:
        return self.duration_seconds + RUN_GRACE_SECONDS


DEFAULT = Workload()


def workload_args(kind: str, w: Workload) -> list[str]:
    """The workload's own `aiperf profile` flags for run `kind` (no place flags)."""
    if kind not in RUNS:
        raise ValueError(f"run {kind!r}: allowed: {', '.join(RUNS)}")
    base = ["--endpoint-type", "chat", "--streaming",
            "--request-count", str(w.requests), "--benchmark-duration", f"{w.duration_seconds:g}",
            "--concurrency", str(w.concurrency), "--random-seed", str(RANDOM_SEED), "--ui", "none",
            "--no-gpu-telemetry"]
    if kind == "agentic":
        sessions = max(1, -(-w.requests // w.turns))
        return base + ["--shared-system-prompt-length", str(w.system_prompt_tokens),
                       "--conversation-num", str(sessions), "--conversation-turn-mean", str(w.turns),
                       "--prompt-corpus", AGENTIC_CORPUS, "--isl", str(AGENTIC_ISL), "--osl", str(OSL)]
    return base + ["--isl", str(SYNTHETIC_ISL), "--osl", str(OSL), "--conversation-num", str(w.requests)]


def trace_args(input_file: str, speedup: float = 1.0) -> list[str]:
    """AIPerf's own replay of a mooncake_trace file (no parser of ours): each request at its timestamp, the first
    at 0 (aiperf config/flags/cli_config.py: --fixed-schedule, --fixed-schedule-auto-offset); time divided by
    `speedup` through AIPerf's synthesizer (dataset/synthesis/synthesizer.py: timestamp / speedup_ratio), the
    only time scale its mooncake_trace loader takes (--replay-speedup is baseten_trace's only)."""
    return (["--endpoint-type", "chat", "--streaming", "--input-file", input_file,
             "--custom-dataset-type", "mooncake_trace", "--fixed-schedule", "--fixed-schedule-auto-offset",
             "--random-seed", str(RANDOM_SEED), "--ui", "none", "--no-gpu-telemetry"]
            + ([] if speedup == 1 else ["--synthesis-speedup-ratio", f"{speedup:g}"]))


def trace_profile_args(input_file: str, speedup: float, *, model: str, url: str, tokenizer: str,
                       artifact_dir: str, extra: Sequence[str] = ()) -> list[str]:
    """`aiperf profile ...` (without the program) replaying `input_file` against `url`: the rehearsal's `--trace`
    and the benchmark Job's `trace` both build their argv here."""
    return ["profile", "--model", model, "--url", url, "--tokenizer", tokenizer, "--artifact-dir", artifact_dir,
            *extra, *trace_args(input_file, speedup)]


def profile_args(kind: str, w: Workload, *, model: str, url: str, tokenizer: str, artifact_dir: str,
                 extra: Sequence[str] = ()) -> list[str]:
    """`aiperf profile ...` (without the program) for run `kind` against `url`; `extra`: place-only flags."""
    return ["profile", "--model", model, "--url", url, "--tokenizer", tokenizer, "--artifact-dir", artifact_dir,
            *extra, *workload_args(kind, w)]


def without_place(args: Sequence[str], extra_flags: Sequence[str] = ()) -> list[str]:
    """An `aiperf profile` argv minus its place flags (and their values): what two runs must share."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in PLACE_FLAGS:
            skip = True
        elif a not in extra_flags:
            out.append(a)
    return out


# ---------------------------------------------------------------------------------------------------------------
# AIPerf's JSON export -> the summary the rehearsal report and the Job's log carry

def percentiles(stats: Optional[Mapping[str, Any]]) -> dict[str, Optional[float]]:
    stats = stats or {}
    return {p: (None if stats.get(p) is None else round(float(stats[p]), 3)) for p in ("p50", "p90", "p99")}


def load_summary(export: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """requests, TTFT and ITL p50/p90/p99 (ms), output tokens/s from AIPerf's profile_export_aiperf.json."""
    s = export or {}
    throughput = (s.get("output_token_throughput") or {}).get("avg")
    return {
        "requests": int((s.get("request_count") or {}).get("avg") or 0),
        "ttft_ms": percentiles(s.get("time_to_first_token")),
        "itl_ms": percentiles(s.get("inter_token_latency")),
        "output_tokens_per_second": None if throughput is None else round(float(throughput), 2),
    }


# The KV router's own counters, per routing phase (its `phase` label: prefill, decode, aggregated), as AIPerf's
# server_metrics_export.json carries them over the profiling phase: AIPerf scrapes --url's /metrics (the frontend,
# where the KV router runs) by default, in the rehearsal and in the cluster Job alike (aiperf config/flags/cli_config.py
# --server-metrics). Names: dynamo/prometheus_names.py router.* (dynamo_component_ prefix, AIPerf drops _total).
SERVER_METRICS_FILE = "server_metrics_export.json"
ROUTER_INPUT = "dynamo_component_router_input_sequence_tokens"  # histogram: prompt tokens routed, per phase
ROUTER_CACHED = "dynamo_component_router_kv_selected_cached_prefix_tokens"  # counter: cached prefix on the chosen worker
ROUTER_REUSED = "dynamo_component_router_kv_worker_reused_tokens"  # counter: cache hits the backend reported


def hit_rate_by_phase(export: Optional[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """{phase: prompt tokens routed, cached prefix tokens on the chosen workers (the workers' KV events, as the router
    indexed them), the backends' reported reused tokens, hit rate = cached / prompt} from AIPerf's server metrics."""
    m = (export or {}).get("metrics") or {}

    def by_phase(name: str, stat: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in (m.get(name) or {}).get("series") or []:
            phase, v = (s.get("labels") or {}).get("phase"), (s.get("stats") or {}).get(stat)
            if phase and v is not None:
                out[phase] = out.get(phase, 0.0) + float(v)
        return out

    inp, cached, reused = by_phase(ROUTER_INPUT, "sum"), by_phase(ROUTER_CACHED, "total"), by_phase(ROUTER_REUSED, "total")
    return {
        ph: {
            "input_tokens": int(n),
            "cached_tokens": int(cached.get(ph, 0)),
            "worker_reported_reused_tokens": None if ph not in reused else int(reused[ph]),
            "hit_rate": None if n <= 0 else round(cached.get(ph, 0) / n, 4),
        }
        for ph, n in sorted(inp.items())
    }


# ---------------------------------------------------------------------------------------------------------------
# The Job's trace: the user's ConfigMap, selected as `kimi-k3 rehearse --trace` selects (kimi_k3/sizing/trace_cache.py
# select: the window by timestamp seconds, then the first N; whole lines, unchanged), checked before AIPerf starts.

class TraceRefused(ValueError):
    """The mounted trace cannot be replayed (missing, too large, empty, too long); the message names the source."""


def select_trace(text: str, source: str, *, first: Optional[int] = None,
                 window: Optional[Sequence[float]] = None, max_requests: int,
                 max_seconds: float, speedup: float) -> tuple[list[str], float]:
    """(the selected lines, their replay seconds) of a mooncake_trace text; TraceRefused names `source`."""
    kept: list[str] = []
    stamps: list[float] = []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            ts = json.loads(line)["timestamp"]
            ts = float(ts)
        except (ValueError, KeyError, TypeError):
            raise TraceRefused(f"{source} line {n}: not a mooncake_trace request (a JSON object with timestamp, "
                               "input_length, output_length, hash_ids)") from None
        if window is not None and not window[0] <= ts / 1000 <= window[1]:
            continue
        if first is not None and len(kept) >= first:
            break
        if len(kept) >= max_requests:
            raise TraceRefused(f"{source}: more than {max_requests:,} requests selected; the limit is "
                               f"{max_requests:,}: set trace.first or trace.window")
        kept.append(line + "\n")
        stamps.append(ts)
    if not kept:
        raise TraceRefused(f"{source}: no requests" + (f" in window {window[0]:g}:{window[1]:g} s" if window else ""))
    seconds = (max(stamps) - min(stamps)) / 1000 / speedup
    if seconds > max_seconds:
        raise TraceRefused(f"{source}: the {len(kept):,} selected requests span {seconds:,.0f} s at speedup "
                           f"{speedup:g}; trace.maxSeconds is {max_seconds:,.0f} s: select a shorter window, "
                           "fewer requests or a higher speedup")
    return kept, seconds


def prepare_trace(spec: Mapping[str, Any]) -> float:
    """Read the mounted trace (spec: the plan's `trace`), write the selection where AIPerf reads it; its seconds."""
    source, path = spec["source"], Path(spec["mounted"])
    if not path.is_file():
        raise TraceRefused(f"{source}: not found (create it in the graph's namespace: `kimi-k3 trace-configmap "
                           "FILE` writes it, docs/traces.md)")
    size = path.stat().st_size
    if size > spec["max_bytes"]:
        raise TraceRefused(f"{source}: {size:,} bytes; the limit is {spec['max_bytes']:,} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TraceRefused(f"{source}: cannot be read as UTF-8 text ({err})") from None
    lines, seconds = select_trace(text, source, first=spec.get("first"), window=spec.get("window"),
                                  max_requests=spec["max_requests"], max_seconds=spec["max_seconds"],
                                  speedup=spec["speedup"])
    out = Path(spec["selected"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(lines), encoding="utf-8")
    return seconds


# ---------------------------------------------------------------------------------------------------------------
# The in-cluster runner: `python workload.py --plan plan.json`

def run_plan(plan: Mapping[str, Any], log=print) -> tuple[dict[str, Any], dict[str, str]]:
    """Run each `aiperf profile` of the plan in turn; ({run: summary}, {run: why it failed})."""
    results: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for kind, args in plan["runs"].items():
        artifact_dir = Path(args[args.index("--artifact-dir") + 1])
        deadline = float(plan["run_deadline_seconds"])
        log(f"benchmark {kind}: aiperf {' '.join(args)}")
        started = time.monotonic()
        try:
            code = subprocess.run([sys.executable, "-m", "aiperf", *args], timeout=deadline).returncode
        except subprocess.TimeoutExpired:
            failures[kind] = f"still running after {deadline:.0f} s"
            continue
        except OSError as err:
            failures[kind] = f"could not start aiperf: {err}"
            continue
        export = artifact_dir / RESULT_FILE
        if code != 0 or not export.is_file():
            failures[kind] = f"aiperf exited with code {code}" + ("" if export.is_file() else f", no {export}")
            continue
        summary = load_summary(json.loads(export.read_text()))
        try:  # the KV hit rate per role, from the router's counters AIPerf scraped (absent: not reported)
            phases = hit_rate_by_phase(json.loads((artifact_dir / SERVER_METRICS_FILE).read_text()))
        except (OSError, ValueError):
            phases = {}
        if phases:
            summary["kv_hit_rate_by_phase"] = {k: v["hit_rate"] for k, v in phases.items()}
        if summary["requests"] == 0:
            failures[kind] = "no request completed"
        results[kind] = summary
        # One line per run, machine-readable in `kubectl logs` long after the pod's files are gone.
        log("kimi-k3-benchmark " + json.dumps({"run": kind, "seconds": round(time.monotonic() - started, 1),
                                               **summary}, sort_keys=True))
    return results, failures


def _one_line(results: Mapping[str, Any], failures: Mapping[str, str]) -> str:
    if failures:
        return "benchmark FAILED: " + "; ".join(f"{k}: {v}" for k, v in failures.items())
    return "benchmark done: " + "; ".join(
        f"{k}: {r['requests']} requests, TTFT p50 {r['ttft_ms']['p50']} ms, ITL p50 {r['itl_ms']['p50']} ms, "
        f"{r['output_tokens_per_second']} output tok/s" for k, r in results.items())


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True, help="JSON file: {run_deadline_seconds, runs: {name: [aiperf args]}}")
    p.add_argument("--termination-log", metavar="FILE", help="write the one-line summary here (the Job's "
                   "/dev/termination-log, shown by kubectl describe pod)")
    args = p.parse_args(argv)
    try:
        plan = json.loads(Path(args.plan).read_text())
        if not isinstance(plan.get("runs"), dict) or not plan["runs"]:
            raise ValueError("no runs")
    except (OSError, ValueError) as err:
        print(f"benchmark: --plan {args.plan}: {err}", flush=True)
        return 2
    if plan.get("trace"):
        try:
            seconds = prepare_trace(plan["trace"])
        except TraceRefused as err:
            results, failures = {}, {"trace": str(err)}
        else:
            print(f"benchmark trace: {plan['trace']['source']}: replaying {seconds:.0f} s", flush=True)
            results, failures = run_plan(plan, log=lambda line: print(line, flush=True))
    else:
        results, failures = run_plan(plan, log=lambda line: print(line, flush=True))
    summary = _one_line(results, failures)
    print(summary, flush=True)
    if args.termination_log:
        try:
            with open(args.termination_log, "w") as f:
                f.write(summary[:4000])
        except OSError as err:
            print(f"could not write {args.termination_log}: {err}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
