"""The rehearsal, pure part: a stack's serving graph + the planner's KV capacity -> the local processes that
stand in for it (the real Dynamo frontend and KV router, one dynamo.mocker per worker replica), their flags,
their loopback-only environment, and the report built from what they measured.

The shell (starting processes, AIPerf, plots) is kimi_k3/commands/rehearse.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from kimi_k3.graph.model import Role, ServingGraph
from kimi_k3.k8s.deployment import smoke_block_size
from kimi_k3.sizing.memory import RolePlan

LOOPBACK = "127.0.0.1"
# HF clients (transformers, huggingface_hub) that try the Hub anyway hit a closed loopback port, never the internet.
NO_HUB = "http://127.0.0.1:9"

# The worker's vLLM flag in the graph -> the dynamo.mocker flag with the same meaning (dynamo/mocker/args.py, 1.6.1).
# Only flags the mocker's parser accepts; tests/live/test_rehearse_live.py parses every argv with the installed parser.
MOCKER_FLAG_FOR = {
    "--block-size": "--block-size",
    "--max-model-len": "--max-model-len",
    "--max-num-seqs": "--max-num-seqs",
    "--max-num-batched-tokens": "--max-num-batched-tokens",
    "--disaggregation-mode": "--disaggregation-mode",
}
# vLLM --kv-cache-dtype values -> the mocker's choices (it uses them only to size bytes per token).
MOCKER_KV_DTYPE = {"fp8": "fp8", "bf16": "bfloat16", "auto": "auto"}
# Where a repeated prompt's prefix reuse shows, per mocker engine (Dynamo 1.6.1's wheel runs aisimulate-core 0.13.0):
# vLLM's scheduler reports it in usage (scheduler/vllm/core.rs take_cached_tokens_for_signal -> cached_tokens);
# SGLang's simulates the radix cache and publishes its KV events, but every output has `cached_tokens: None`
# (scheduler/sglang/{decode,core}.rs), so only the KV router's cached-prefix counter sees the reuse.
MOCKER_CACHE_EVIDENCE = {"vllm": "usage", "sglang": "router"}
# Frontend flags the rehearsal sets itself (where it listens, how it finds workers): not taken from the graph.
FRONTEND_OWN_FLAGS = ("--http-port", "--http-host", "--discovery-backend", "--request-plane", "--event-plane")


@dataclass(frozen=True)
class KvCapacity:
    """One worker's simulated KV cache, from the planner (the numbers `kimi-k3 plan` prints for the role)."""

    tokens: int  # "KV capacity (vLLM log)"
    bytes_per_token: int  # "MLA KV per token per GPU"
    num_blocks: int  # tokens in blocks of the graph's --block-size (the KV router's block)

    @classmethod
    def from_plan(cls, plan: RolePlan, block_size: int) -> "KvCapacity":
        tokens = plan.vllm_kv_cache_tokens
        return cls(tokens=tokens, bytes_per_token=int(round(plan.kv_bytes_per_token)), num_blocks=tokens // block_size)


@dataclass(frozen=True)
class ProcessSpec:
    """One local process: `python -m MODULE ARGS` with ENV on top of the shared loopback environment."""

    name: str  # frontend, prefill-0, decode-1, ...
    role: Optional[str]  # the graph role it stands in for (None: the frontend)
    module: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    metrics_port: Optional[int] = None  # where its Prometheus metrics are (/metrics)


@dataclass(frozen=True)
class RolePlanView:
    key: str
    component: str
    mode: str  # agg | prefill | decode (the mocker's --disaggregation-mode)
    replicas: int
    capacity: KvCapacity
    args: tuple[str, ...]  # the mocker argv (one function builds it: mocker_args)


@dataclass(frozen=True)
class Rehearsal:
    stack: str
    served_model_name: str
    max_model_len: int
    block_size: int
    http_port: int
    roles: tuple[RolePlanView, ...]
    processes: tuple[ProcessSpec, ...] = field(default_factory=tuple)
    smoke_block_size: int = 0  # the KV block the smoke test's cache-hit probe spans (manifests.smoke_block_size)
    cache_evidence: str = "usage"  # where the smoke test looks for prefix reuse (MOCKER_CACHE_EVIDENCE)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def workers(self) -> tuple[ProcessSpec, ...]:
        return tuple(p for p in self.processes if p.role is not None)

    @property
    def smoke_options(self) -> dict[str, Any]:
        """smoke.run's keywords for this graph over the mocker: the probe's block and where reuse shows."""
        return {"kv_block_size": self.smoke_block_size, "cache_evidence": self.cache_evidence}


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


# An SGLang worker's flag -> the mocker's (dynamo/mocker/args.py 1.6.1: --engine-type sglang simulates SGLang's
# scheduler; --sglang-* are its knobs; fcfs is the mocker's deprecated alias of fifo).
MOCKER_SGLANG_FLAG_FOR = {
    "--context-length": "--max-model-len",
    "--max-running-requests": "--max-num-seqs",
    "--disaggregation-mode": "--disaggregation-mode",
    "--chunked-prefill-size": "--sglang-chunked-prefill-size",
    "--max-prefill-tokens": "--sglang-max-prefill-tokens",
}
MOCKER_SGLANG_POLICY = {"fcfs": "fifo", "lpm": "lpm"}


def _sglang_mocker_flags(role: Role, flags: dict[str, Any]) -> list[str]:
    """The SGLang role's serving facts as the mocker's SGLang simulation takes them; its block is the router's
    (page x DCP), the unit the real worker registers and emits KV events in."""
    out = ["--engine-type", "sglang", "--block-size", str(role.block_size)]
    for flag, mocker_flag in MOCKER_SGLANG_FLAG_FOR.items():
        if flag in flags and flags[flag] is not True:
            out += [mocker_flag, str(flags[flag])]
    policy = flags.get("--schedule-policy")
    if isinstance(policy, str) and policy in MOCKER_SGLANG_POLICY:
        out += ["--sglang-schedule-policy", MOCKER_SGLANG_POLICY[policy]]
    return out


def mocker_args(
    role: Role,
    capacity: KvCapacity,
    *,
    model_path: str,
    served_model_name: str,
    speedup_ratio: float = 1.0,
    perf_profile: Optional[str] = None,
) -> tuple[str, ...]:
    """The dynamo.mocker argv for one replica of `role`: its serving facts from the graph, its KV cache from the
    planner. The one place mocker flags are made (a perf profile, e.g. from aiconfigurator, plugs in here)."""
    flags = parse_flags(role.args)
    out: list[str] = ["--model-path", model_path, "--model-name", served_model_name]
    if role.engine == "sglang":
        out += _sglang_mocker_flags(role, flags)
    else:
        for vllm_flag, mocker_flag in MOCKER_FLAG_FOR.items():
            if vllm_flag in flags and flags[vllm_flag] is not True:
                out += [mocker_flag, str(flags[vllm_flag])]
    out += ["--kv-cache-dtype", MOCKER_KV_DTYPE[role.kv_cache_dtype]]
    if "--max-model-len" not in out:
        out += ["--max-model-len", str(role.max_model_len)]
    # vLLM V1 caches prefixes unless told not to (the recipes say it explicitly); SGLang's radix cache likewise.
    out.append("--enable-prefix-caching" if role.prefix_caching else "--no-enable-prefix-caching")
    out += [
        "--num-gpu-blocks-override",
        str(capacity.num_blocks),
        "--kv-bytes-per-token",
        str(capacity.bytes_per_token),
        "--speedup-ratio",
        f"{speedup_ratio:g}",
    ]
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
    out += [
        "--http-host",
        LOOPBACK,
        "--http-port",
        str(http_port),
        "--discovery-backend",
        "file",
        "--request-plane",
        "tcp",
        "--event-plane",
        "zmq",
    ]
    return tuple(out)


def zmq_broker_url(xsub_port: int, xpub_port: int) -> str:
    """DYN_ZMQ_BROKER_URL of the rehearsal's broker (kimi_k3/rehearsal/broker.py), in the runtime's format
    "xsub=<urls> , xpub=<urls>" (lib/runtime/src/transports/event_plane, parse_broker_url)."""
    return f"xsub=tcp://{LOOPBACK}:{xsub_port} , xpub=tcp://{LOOPBACK}:{xpub_port}"


def loopback_env(discovery_dir: str, broker_ports: tuple[int, int]) -> dict[str, str]:
    """Environment every process gets: discovery in a local directory, every advertised address on loopback, and
    the event plane through the loopback broker (direct ZMQ publishers would bind 0.0.0.0, with no setting)."""
    return {
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": discovery_dir,
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_ZMQ_BROKER_URL": zmq_broker_url(*broker_ports),
        # What the runtime advertises and binds (lib/runtime: tcp request server, ZMQ event publishers, response
        # streams, the system status server); DYN_HTTP_RPC_HOST is the mocker's disaggregation bootstrap host.
        "DYN_TCP_RPC_HOST": LOOPBACK,
        "DYN_EVENT_PLANE_HOST": LOOPBACK,
        "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
        "DYN_SYSTEM_HOST": LOOPBACK,
        "DYN_HTTP_RPC_HOST": LOOPBACK,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_ENDPOINT": NO_HUB,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "OTEL_SDK_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


def perf_profile(graph: ServingGraph) -> dict[str, Any]:
    """The mocker's timing tables (its --planner-profile-data NPZ keys) from the calibrated performance model of
    this graph's layout on its platform (kimi_k3/sizing/perf.py): rehearsal latencies then say something about GB200/GB300.
    Raises perf.PerfError where the model has no numbers for the layout."""
    from kimi_k3.sizing import mocker, perf

    staged = [r for r in graph.roles if r.pp > 1]
    if staged:  # as `plan` refuses it (commands/plan_perf.layout_of): a pipeline's speed is not a TP group's
        r = staged[0]
        raise perf.PerfError(f"TP{r.tp} x PP{r.pp} on {graph.platform.name}: no pipeline-parallel layout is modelled")
    layout = perf.Layout.from_roles(
        perf.RoleLayout(r.key, "prefill" if r.type == "prefill" else "decode", graph.platform.name, r.tp, r.replicas)
        for r in graph.roles
    )
    return mocker.mocker_profile(layout, max_num_seqs=graph.decode_max_num_seqs)


def plan_rehearsal(
    graph: ServingGraph,
    role_plans: Mapping[str, RolePlan],
    *,
    http_port: int,
    metrics_ports: Iterable[int],
    model_path: str,
    speedup_ratio: float = 1.0,
    perf_profile: Optional[str] = None,
) -> Rehearsal:
    """Every process of the rehearsal, from the graph that renders the manifests and the planner's KV plan."""
    ports = iter(metrics_ports)
    roles, processes = (
        [],
        [
            ProcessSpec(
                name="frontend",
                role=None,
                module="dynamo.frontend",
                args=frontend_args(graph, http_port),
                metrics_port=http_port,
            )
        ],
    )
    for role in graph.roles:
        capacity = KvCapacity.from_plan(role_plans[role.key], graph.block_size)
        args = mocker_args(
            role,
            capacity,
            model_path=model_path,
            served_model_name=graph.served_model_name,
            speedup_ratio=speedup_ratio,
            perf_profile=perf_profile,
        )
        roles.append(
            RolePlanView(
                key=role.key,
                component=role.component,
                mode=disaggregation_mode(role),
                replicas=role.replicas,
                capacity=capacity,
                args=args,
            )
        )
        for i in range(role.replicas):
            port = next(ports)
            processes.append(
                ProcessSpec(
                    name=f"{role.key}-{i}",
                    role=role.key,
                    module="dynamo.mocker",
                    args=args,
                    env=(("DYN_SYSTEM_PORT", str(port)),),
                    metrics_port=port,
                )
            )
    return Rehearsal(
        stack=graph.stack,
        served_model_name=graph.served_model_name,
        max_model_len=max(r.max_model_len for r in graph.roles),
        block_size=graph.block_size,
        http_port=http_port,
        roles=tuple(roles),
        processes=tuple(processes),
        smoke_block_size=smoke_block_size(graph),
        # one engine whose mocker hides reuse from usage: the whole graph is checked at the router
        cache_evidence="router" if any(MOCKER_CACHE_EVIDENCE[r.engine] == "router" for r in graph.roles) else "usage",
    )


# ---------------------------------------------------------------------------------------------------------------
# Discovery and metrics (what the running graph reports about itself)


# ---------------------------------------------------------------------------------------------------------------
# Report
