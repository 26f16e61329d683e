"""The rehearsal, pure part: a stack's serving graph + the planner's KV capacity -> the local processes that
stand in for it (the real Dynamo frontend and KV router, one dynamo.mocker per worker replica), their flags,
their loopback-only environment, and the report built from what they measured.

The shell (starting processes, AIPerf, plots) is kimi_k3/commands/rehearse.py.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from . import workload
from .graph import Role, ServingGraph, role_prefix_caching
from .manifests import smoke_block_size
from .planner import RolePlan, plan_role

LOOPBACK = "127.0.0.1"
# HF clients (transformers, huggingface_hub) that try the Hub anyway hit a closed loopback port, never the internet.
NO_HUB = "http://127.0.0.1:9"

# The worker's vLLM flag in the graph -> the dynamo.mocker flag with the same meaning (dynamo/mocker/args.py, 1.6.1).
# Only flags the mocker's parser accepts; tests/test_rehearse_live.py parses every argv with the installed parser.
MOCKER_FLAG_FOR = {
    "--block-size": "--block-size",
    "--max-model-len": "--max-model-len",
    "--max-num-seqs": "--max-num-seqs",
    "--max-num-batched-tokens": "--max-num-batched-tokens",
    "--disaggregation-mode": "--disaggregation-mode",
}
# vLLM --kv-cache-dtype values -> the mocker's choices (it uses them only to size bytes per token).
MOCKER_KV_DTYPE = {"fp8": "fp8", "bf16": "bfloat16", "auto": "auto"}
# Frontend flags the rehearsal sets itself (where it listens, how it finds workers): not taken from the graph.
FRONTEND_OWN_FLAGS = ("--http-port", "--http-host", "--discovery-backend", "--request-plane", "--event-plane")


@dataclass(frozen=True)
class KvCapacity:
    """One worker's simulated KV cache, from the planner (the numbers `kimi-k3 plan` prints for the role)."""

    tokens: int                 # "KV capacity (vLLM log)"
    bytes_per_token: int        # "MLA KV per token per GPU"
    num_blocks: int             # tokens in blocks of the graph's --block-size (the KV router's block)

    @classmethod
    def from_plan(cls, plan: RolePlan, block_size: int) -> "KvCapacity":
        tokens = plan.vllm_kv_cache_tokens
        return cls(tokens=tokens, bytes_per_token=int(round(plan.kv_bytes_per_token)),
                   num_blocks=tokens // block_size)


@dataclass(frozen=True)
class ProcessSpec:
    """One local process: `python -m MODULE ARGS` with ENV on top of the shared loopback environment."""

    name: str                   # frontend, prefill-0, decode-1, ...
    role: Optional[str]         # the graph role it stands in for (None: the frontend)
    module: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    metrics_port: Optional[int] = None   # where its Prometheus metrics are (/metrics)


@dataclass(frozen=True)
class RolePlanView:
    key: str
    component: str
    mode: str                   # agg | prefill | decode (the mocker's --disaggregation-mode)
    replicas: int
    capacity: KvCapacity
    args: tuple[str, ...]       # the mocker argv (one function builds it: mocker_args)


@dataclass(frozen=True)
class Rehearsal:
    stack: str
    served_model_name: str
    max_model_len: int
    block_size: int
    http_port: int
    roles: tuple[RolePlanView, ...]
    processes: tuple[ProcessSpec, ...] = field(default_factory=tuple)
    smoke_block_size: int = 0   # the KV block the smoke test's cache-hit probe spans (manifests.smoke_block_size)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def workers(self) -> tuple[ProcessSpec, ...]:
        return tuple(p for p in self.processes if p.role is not None)


def parse_flags(args: Iterable[str]) -> dict[str, Any]:
    """A flag list as the graph renders it (`--flag value` or a bare `--flag`) back into {flag: value | True}."""
    out: dict[str, Any] = {}
    items = list(args)
    i = 0
    while i < len(items):
        flag = items[i]
        if i + 1 < len(items) and not items[i + 1].startswith("--"):
            out[flag] = items[i + 1]
            i += 2
        else:
            out[flag] = True
            i += 1
    return out


def disaggregation_mode(role: Role) -> str:
    return str(parse_flags(role.args).get("--disaggregation-mode", "agg"))


def mocker_args(role: Role, capacity: KvCapacity, *, model_path: str, served_model_name: str,
                speedup_ratio: float = 1.0, perf_profile: Optional[str] = None) -> tuple[str, ...]:
    """The dynamo.mocker argv for one replica of `role`: its serving facts from the graph, its KV cache from the
    planner. The one place mocker flags are made (a perf profile, e.g. from aiconfigurator, plugs in here)."""
    flags = parse_flags(role.args)
    out: list[str] = ["--model-path", model_path, "--model-name", served_model_name]
    for vllm_flag, mocker_flag in MOCKER_FLAG_FOR.items():
        if vllm_flag in flags and flags[vllm_flag] is not True:
            out += [mocker_flag, str(flags[vllm_flag])]
    out += ["--kv-cache-dtype", MOCKER_KV_DTYPE[role.kv_cache_dtype]]
    if "--max-model-len" not in flags:
        out += ["--max-model-len", str(role.max_model_len)]
    # vLLM V1 caches prefixes unless told not to; the recipes say it explicitly.
    out.append("--no-enable-prefix-caching" if "--no-enable-prefix-caching" in flags else "--enable-prefix-caching")
    out += ["--num-gpu-blocks-override", str(capacity.num_blocks),
            "--kv-bytes-per-token", str(capacity.bytes_per_token),
            "--speedup-ratio", f"{speedup_ratio:g}"]
    if perf_profile:
        out += ["--planner-profile-data", perf_profile]
    out += ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
    return tuple(out)


def frontend_args(graph: ServingGraph, http_port: int) -> tuple[str, ...]:
    """The frontend with the stack's own arguments (router mode, KV block size, KV events), on loopback."""
    out: list[str] = []
    for flag, value in parse_flags(graph.frontend.args).items():
        if flag in FRONTEND_OWN_FLAGS:
            continue
        out += [flag] if value is True else [flag, str(value)]
    out += ["--http-host", LOOPBACK, "--http-port", str(http_port),
            "--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
    return tuple(out)


def zmq_broker_url(xsub_port: int, xpub_port: int) -> str:
    """DYN_ZMQ_BROKER_URL of the rehearsal's broker (kimi_k3/rehearse_broker.py), in the runtime's format
    "xsub=<urls> , xpub=<urls>" (lib/runtime/src/transports/event_plane, parse_broker_url)."""
    return f"xsub=tcp://{LOOPBACK}:{xsub_port} , xpub=tcp://{LOOPBACK}:{xpub_port}"


def loopback_env(discovery_dir: str, broker_ports: tuple[int, int]) -> dict[str, str]:
    """Environment every process gets: discovery in a local directory, every advertised address on loopback, and
    the event plane through the loopback broker (direct ZMQ publishers would bind 0.0.0.0, with no setting)."""
    return {
        "DYN_DISCOVERY_BACKEND": "file", "DYN_FILE_KV": discovery_dir,
        "DYN_REQUEST_PLANE": "tcp", "DYN_EVENT_PLANE": "zmq", "DYN_ZMQ_BROKER_URL": zmq_broker_url(*broker_ports),
        # What the runtime advertises and binds (lib/runtime: tcp request server, ZMQ event publishers, response
        # streams, the system status server); DYN_HTTP_RPC_HOST is the mocker's disaggregation bootstrap host.
        "DYN_TCP_RPC_HOST": LOOPBACK, "DYN_EVENT_PLANE_HOST": LOOPBACK, "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
        "DYN_SYSTEM_HOST": LOOPBACK, "DYN_HTTP_RPC_HOST": LOOPBACK,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_ENDPOINT": NO_HUB,
        "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1", "OTEL_SDK_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }


def role_kv_plans(graph: ServingGraph) -> dict[str, RolePlan]:
    """Each role's memory plan, as `kimi-k3 plan STACK` computes it (planner.plan_role with the role's facts)."""
    return {r.key: plan_role(graph.platform.name, r.tp, dcp=r.dcp, gpu_memory_utilization=r.gpu_memory_utilization,
                             kv_cache_dtype=r.kv_cache_dtype, max_model_len=r.max_model_len,
                             prefix_caching=role_prefix_caching(r)) for r in graph.roles}


def perf_profile(graph: ServingGraph) -> dict[str, Any]:
    """The mocker's timing tables (its --planner-profile-data NPZ keys) from the calibrated performance model of
    this graph's layout on its platform (kimi_k3/perf.py): rehearsal latencies then say something about GB200/GB300.
    Raises perf.PerfError where the model has no numbers for the layout."""
    from . import perf

    layout = perf.Layout.from_roles(
        perf.RoleLayout(r.key, "prefill" if r.type == "prefill" else "decode", graph.platform.name, r.tp, r.replicas)
        for r in graph.roles)
    return perf.mocker_profile(layout)


def plan_rehearsal(graph: ServingGraph, role_plans: Mapping[str, RolePlan], *, http_port: int,
                   metrics_ports: Iterable[int], model_path: str, speedup_ratio: float = 1.0,
                   perf_profile: Optional[str] = None) -> Rehearsal:
    """Every process of the rehearsal, from the graph that renders the manifests and the planner's KV plan."""
    ports = iter(metrics_ports)
    roles, processes = [], [ProcessSpec(name="frontend", role=None, module="dynamo.frontend",
                                        args=frontend_args(graph, http_port), metrics_port=http_port)]
    for role in graph.roles:
        capacity = KvCapacity.from_plan(role_plans[role.key], graph.block_size)
        args = mocker_args(role, capacity, model_path=model_path, served_model_name=graph.served_model_name,
                           speedup_ratio=speedup_ratio, perf_profile=perf_profile)
        roles.append(RolePlanView(key=role.key, component=role.component, mode=disaggregation_mode(role),
                                  replicas=role.replicas, capacity=capacity, args=args))
        for i in range(role.replicas):
            port = next(ports)
            processes.append(ProcessSpec(name=f"{role.key}-{i}", role=role.key, module="dynamo.mocker", args=args,
                                         env=(("DYN_SYSTEM_PORT", str(port)),), metrics_port=port))
    return Rehearsal(stack=graph.stack, served_model_name=graph.served_model_name,
                     max_model_len=max(r.max_model_len for r in graph.roles), block_size=graph.block_size,
                     http_port=http_port, roles=tuple(roles), processes=tuple(processes),
                     smoke_block_size=smoke_block_size(graph))


# ---------------------------------------------------------------------------------------------------------------
# Discovery and metrics (what the running graph reports about itself)

def registered_workers(discovery_keys: Iterable[str]) -> dict[str, int]:
    """Worker instances per endpoint component ('backend', 'prefill') from the file discovery store's keys,
    e.g. 'v1/instances/dynamo/prefill/generate/1a2b' (URL-decoded)."""
    out: dict[str, int] = {}
    for key in discovery_keys:
        parts = key.split("/")
        if len(parts) >= 6 and parts[0] == "v1" and parts[1] == "instances" and parts[4] == "generate":
            out[parts[3]] = out.get(parts[3], 0) + 1
    return out


# A mocker's --disaggregation-mode -> the worker type its model card declares, as the frontend's
# GET /v1/models/{model}/ready counts live workers (dynamo-kv-router WorkerType, lowercase).
FRONTEND_WORKER_TYPE = {"agg": "aggregated", "prefill": "prefill", "decode": "decode"}


def frontend_workers_wanted(rehearsal: "Rehearsal") -> dict[str, int]:
    """Live workers per worker type the frontend must see before the graph counts as ready: every replica."""
    out: dict[str, int] = {}
    for r in rehearsal.roles:
        kind = FRONTEND_WORKER_TYPE[r.mode]
        out[kind] = out.get(kind, 0) + r.replicas
    return out


def endpoint_component(mode: str) -> str:
    """The endpoint a mocker registers by default (dynamo/mocker/args.py: DEFAULT_PREFILL_ENDPOINT, DEFAULT_ENDPOINT)."""
    return "prefill" if mode == "prefill" else "backend"


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text exposition -> [(name, labels, value)] (comments and unparsable lines skipped)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def metric_sum(samples: Iterable[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


def kv_hit_rate(frontend_samples: list[tuple[str, dict[str, str], float]]) -> Optional[float]:
    """Share of prompt tokens served from cache, as the frontend counts them (Dynamo's own metrics)."""
    prompt = metric_sum(frontend_samples, "dynamo_frontend_input_sequence_tokens_sum")
    cached = metric_sum(frontend_samples, "dynamo_frontend_cached_tokens_sum")
    return None if prompt <= 0 else round(cached / prompt, 4)


def worker_requests(worker_samples: list[tuple[str, dict[str, str], float]]) -> float:
    """Requests one worker process handled on its generate endpoint (its own system server's metrics)."""
    return metric_sum(worker_samples, "dynamo_component_requests_total", dynamo_endpoint="generate")


# ---------------------------------------------------------------------------------------------------------------
# Report

# The stable `load` block from AIPerf's profile_export_aiperf.json: the same summary the benchmark Job logs.
percentiles = workload.percentiles
aiperf_load = workload.load_summary


def build_report(rehearsal: Rehearsal, *, ready_seconds: Optional[float], registered: Mapping[str, int],
                 smoke: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]], kv_hit: Optional[float],
                 worker_load: Mapping[str, float], failure: Optional[str] = None,
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """report.json: the issue's stable keys first (stack, ready_seconds, workers, smoke, load, kv_hit_rate)."""
    main_run = runs.get("agentic") or next(iter(runs.values()), None)
    load = aiperf_load(main_run)
    by_mode: dict[str, float] = {}
    for role in rehearsal.roles:
        by_mode[role.mode] = by_mode.get(role.mode, 0.0) + sum(
            v for k, v in worker_load.items() if k.startswith(role.key + "-"))
    report: dict[str, Any] = {
        "stack": rehearsal.stack,
        "ready_seconds": None if ready_seconds is None else round(ready_seconds, 2),
        "workers": [{"role": r.key, "replicas": r.replicas,
                     "registered": int(registered.get(endpoint_component(r.mode), 0))} for r in rehearsal.roles],
        "smoke": {"passed": bool(smoke.get("passed")), "checks": dict(smoke.get("checks") or {})},
        "load": load,
        "kv_hit_rate": kv_hit,
        # Beyond the stable keys: detail for people and plots.
        "runs": {name: aiperf_load(s) for name, s in runs.items()},
        "worker_requests": {k: int(v) for k, v in sorted(worker_load.items())},
        "prefill_decode_requests": ({"prefill": int(by_mode.get("prefill", 0)), "decode": int(by_mode.get("decode", 0))}
                                    if "prefill" in by_mode else None),
        "roles": {r.key: {"component": r.component, "mode": r.mode, "replicas": r.replicas,
                          "kv_capacity_tokens": r.capacity.tokens, "kv_bytes_per_token": r.capacity.bytes_per_token,
                          "num_gpu_blocks": r.capacity.num_blocks, "mocker_args": list(r.args)}
                  for r in rehearsal.roles},
        "block_size": rehearsal.block_size,
        "max_model_len": rehearsal.max_model_len,
        "smoke_failures": dict(smoke.get("failures") or {}),
        "failure": failure,
        "tokenizer": "rehearsal fixture (kimi_k3/rehearse_fixture.py), not Kimi K3's: token counts are the fixture's",
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
        + ("Each mocker's step timing is the calibrated performance model of this layout on its GPUs (`kimi-k3 plan` "
           "numbers, fed as the mocker's profile data), so latencies approximate GB200/GB300 for the fixture's prompt "
           "lengths. " if report.get("timing") == "perf model" else
           "Latencies are the mocker's own timing model on this machine, not GB200/GB300 numbers. ")
        + "Token counts come from the rehearsal's small fixture tokenizer, not Kimi K3's.", "",
        f"- graph ready in **{_fmt(report['ready_seconds'], ' s')}** (block size {report['block_size']}, "
        f"context {report['max_model_len']:,} tokens)",
        "- KV cache hit rate during the load (frontend's cached / prompt tokens): **"
        + ("-" if report["kv_hit_rate"] is None else f"{100 * report['kv_hit_rate']:.1f}%") + "**", "",
        "| role | replicas | registered | KV capacity (tokens) | blocks | KV bytes/token | requests handled |",
        "|---|---|---|---|---|---|---|",
    ]
    t = report.get("trace")
    if t:
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"   # noqa: E731
        lines[-3:-3] = [
            f"- trace `{t['file']}`: {t['requests']:,} requests over {t['duration_s']:,.1f} s, replayed in "
            f"{t['replay_seconds']:,.1f} s (speedup {t['speedup']:g}); input tokens p50/p90/p99 "
            f"{t['isl']['p50']:,.0f} / {t['isl']['p90']:,.0f} / {t['isl']['p99']:,.0f}, output "
            f"{t['osl']['p50']:,.0f} / {t['osl']['p90']:,.0f} / {t['osl']['p99']:,.0f}",
            f"- KV hit rate achieved **{pct(t['achieved_hit_rate'])}** vs the best any cache could reach on this "
            f"trace at block size {t['block_size']} (its prefix hashes alone) **{pct(t['best_hit_rate'])}**"]
    for w in report["workers"]:
        r = report["roles"][w["role"]]
        handled = sum(v for k, v in report["worker_requests"].items() if k.startswith(w["role"] + "-"))
        lines.append(f"| {w['role']} ({r['mode']}) | {w['replicas']} | {w['registered']} | {r['kv_capacity_tokens']:,} "
                     f"| {r['num_gpu_blocks']:,} | {r['kv_bytes_per_token']:,} | {handled} |")
    lines += ["", "## Smoke test", "", "| check | result |", "|---|---|"]
    for name, passed in report["smoke"]["checks"].items():
        why = report["smoke_failures"].get(name, "")
        lines.append(f"| {name} | {'ok' if passed else 'FAILED ' + why} |")
    lines += ["", "## Load (AIPerf)", "", "| run | requests | TTFT p50/p90/p99 ms | ITL p50/p90/p99 ms | output tok/s |",
              "|---|---|---|---|---|"]
    for name, run in report["runs"].items():
        t, i = run["ttft_ms"], run["itl_ms"]
        lines.append(f"| {name} | {run['requests']} | {_fmt(t['p50'])} / {_fmt(t['p90'])} / {_fmt(t['p99'])} | "
                     f"{_fmt(i['p50'])} / {_fmt(i['p90'])} / {_fmt(i['p99'])} | {_fmt(run['output_tokens_per_second'])} |")
    if report.get("prefill_decode_requests"):
        pd = report["prefill_decode_requests"]
        lines += ["", f"Prefill/decode balance: {pd['prefill']} prefill requests, {pd['decode']} decode requests."]
    for p in plots:
        lines += ["", f"![{p}]({p})"]
    return "\n".join(lines) + "\n"


def format_seconds(s: float) -> str:
    return f"{s:.1f}s" if s < 60 else f"{int(s // 60)}m{math.floor(s % 60):02d}s"
