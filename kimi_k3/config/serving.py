"""stack.py -> serving.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import math
import re
from typing import Literal, Optional

from pydantic import Field, field_validator

from kimi_k3.config.base import DNS_LABEL, FlagValue, Quantity, Strict, allowed_as
from kimi_k3.config.trace import BenchmarkTraceConfig
from kimi_k3.errors import shown
from kimi_k3.pods import workload

FLAG_NAME = re.compile(r"^--[a-z0-9][a-z0-9-]*$")


ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # Kubernetes' rule for env var names (IsEnvVarName)


def check_flags(v: dict[str, FlagValue]) -> dict[str, FlagValue]:
    """A flag map of a role or the frontend: long flag names; no negative numbers, empty text or NaN as values."""
    for flag, value in v.items():
        if not FLAG_NAME.match(flag):
            raise ValueError(
                f"extra arg {shown(flag)} must be a long flag starting with '--' (lower-case letters, "
                "digits and '-'; its value goes in the value, not after '=')"
            )
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
            if not value.strip():
                raise ValueError(
                    f"{flag} = {shown(value)}: empty; allowed: a value, true for a bare flag, or null to drop it"
                )
        if number is not None and (not math.isfinite(number) or number < 0):
            raise ValueError(
                f"{flag} = {shown(value)}: vLLM and Dynamo take counts, sizes and fractions here; "
                "allowed: a finite number >= 0"
            )
    return v


def check_env(v: dict[str, Optional[str]]) -> dict[str, Optional[str]]:
    for name in v:
        if not ENV_NAME.match(name):
            raise ValueError(
                f"env name {shown(name)}: allowed: letters, digits, '_', '-', '.', not starting with a "
                "digit (Kubernetes refuses others)"
            )
    return v


class RoleOverride(Strict):
    """`kimi-k3:serving.roles.<role>`: per-role overrides of the recipe."""

    replicas: Optional[int] = Field(None, ge=0)
    tp: Optional[int] = Field(None, ge=1, description="tensor-parallel size; must fill whole nodes")
    nodes_per_replica: Optional[int] = Field(None, alias="nodesPerReplica", ge=1)
    dcp: Optional[int] = Field(
        None, ge=1, description="vLLM decode context parallel size (divides tp; recipes/facts/dcp.yaml)"
    )
    gpu_memory_utilization: Optional[float] = Field(None, alias="gpuMemoryUtilization", gt=0, le=1)
    shared_memory_size: Optional[Quantity] = Field(None, alias="sharedMemorySize")
    extra_args: dict[str, FlagValue] = Field(default_factory=dict, alias="extraArgs")
    env: dict[str, Optional[str]] = Field(default_factory=dict)

    _flags = field_validator("extra_args")(classmethod(lambda cls, v: check_flags(v)))
    _env = field_validator("env")(classmethod(lambda cls, v: check_env(v)))


class FrontendOverride(Strict):
    replicas: Optional[int] = Field(None, ge=1)
    # Dynamo's --migration-limit (a u32, 0 = off); default recipes/defaults/request-migration.yaml
    migration_limit: Optional[int] = Field(None, alias="migrationLimit", ge=0, le=2**32 - 1)
    extra_args: dict[str, FlagValue] = Field(default_factory=dict, alias="extraArgs")
    env: dict[str, Optional[str]] = Field(default_factory=dict)

    _flags = field_validator("extra_args")(classmethod(lambda cls, v: check_flags(v)))
    _env = field_validator("env")(classmethod(lambda cls, v: check_env(v)))


class RolloutConfig(Strict):
    """`kimi-k3:serving.rollout`: how an update rolls through the workers (docs/operating.md#rollouts)."""

    surge: int = Field(
        0,
        ge=0,
        le=2,
        description="extra replicas of every worker role while a rollout is staged; "
        "Grove recreates one replica at a time (RollingRecreate, no maxSurge), so a role with one "
        "replica has no serving replica during its rollout unless surged",
    )


class PreflightConfig(Strict):
    """`kimi-k3:serving.preflight`: the fabric check that runs on the GPU nodes before workers load weights."""

    enabled: bool = True
    min_bus_bandwidth_gbps: float = Field(
        300.0,
        alias="minBusBandwidthGBps",
        gt=0,
        description="NCCL all-reduce bus bandwidth a TP group must reach (GB/s)",
    )
    timeout_seconds: int = Field(1800, alias="timeoutSeconds", ge=60)


# AIPerf's own image, at the version the rehearsal runs (requirements-rehearse.txt): the image `aiperf kube` 0.13.0
# deploys (aiperf/cli_commands/kube/_kube_common.py, pin_default_direct_image: nvcr.io/nvidia/aiperf:<version>).
BENCHMARK_IMAGE = "nvcr.io/nvidia/aiperf:0.13.0"


class BenchmarkConfig(Strict):
    """`kimi-k3:serving.benchmark`: after the smoke test, an AIPerf Job runs the rehearsal's workload
    (kimi_k3/pods/workload.py) against the frontend Service; off by default. Results: `kubectl logs job/kimi-k3-benchmark`."""

    enabled: bool = Field(
        False,
        description="run the AIPerf benchmark Job after the smoke test (`pulumi up` waits "
        "for it and fails if a run fails)",
    )
    image: str = Field(BENCHMARK_IMAGE, min_length=1, description="AIPerf image (a pinned tag or digest)")
    requests: int = Field(workload.DEFAULT.requests, ge=1, le=10000, description="requests per run")
    duration_seconds: float = Field(
        workload.DEFAULT.duration_seconds,
        alias="durationSeconds",
        gt=0,
        le=3600,
        description="time cap per run (AIPerf --benchmark-duration)",
    )
    concurrency: int = Field(workload.DEFAULT.concurrency, ge=1, le=1024, description="requests in flight")
    system_prompt_tokens: int = Field(
        workload.DEFAULT.system_prompt_tokens,
        alias="systemPromptTokens",
        ge=0,
        le=262144,
        description="shared system prompt of the agentic run, in tokens",
    )
    turns: int = Field(workload.DEFAULT.turns, ge=1, le=64, description="turns per agentic conversation")
    runs: list[Literal["agentic", "synthetic"]] = Field(
        list(workload.RUNS), min_length=1, description="which runs, in order"
    )
    trace: Optional[BenchmarkTraceConfig] = Field(
        None, description="replay this trace (a ConfigMap you create) instead of the runs (docs/traces.md)"
    )

    @field_validator("image")
    @classmethod
    def _pinned(cls, v: str) -> str:
        from kimi_k3.facts.images import pin_problem

        problem = pin_problem(v)
        if problem:
            raise ValueError(f"{problem}; allowed: a version tag or a digest, e.g. {BENCHMARK_IMAGE}")
        return v

    @field_validator("runs")
    @classmethod
    def _once_each(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"each run at most once; allowed: a list from {', '.join(workload.RUNS)}")
        return v

    def to_workload(self) -> "workload.Workload":
        return workload.Workload(
            requests=self.requests,
            duration_seconds=self.duration_seconds,
            concurrency=self.concurrency,
            system_prompt_tokens=self.system_prompt_tokens,
            turns=self.turns,
            runs=tuple(self.runs),
        )


class AutoscalingConfig(Strict):
    """`kimi-k3:serving.autoscaling`: Dynamo's SLA planner owns the worker replicas (docs/operating.md#autoscaling)."""

    enabled: bool = Field(
        False, description="add Dynamo's SLA planner to the graph; it owns the worker roles' replicas"
    )
    ttft_ms: Optional[float] = Field(
        None, alias="ttftMs", gt=0, description="TTFT target (ms) the planner holds; required when enabled"
    )
    itl_ms: Optional[float] = Field(
        None, alias="itlMs", gt=0, description="inter-token latency target (ms); required when enabled"
    )
    min_replicas: dict[str, int] = Field(
        default_factory=dict,
        alias="minReplicas",
        description="per role, the replicas the planner never goes below; default: the role's configured replicas",
    )
    max_gpu_budget: Optional[int] = Field(
        None,
        alias="maxGpuBudget",
        ge=1,
        description="GPUs the planner may use; default (eks): the Capacity Block's "
        "instances x GPUs per instance; required on other clusters",
    )
    adjustment_interval_seconds: int = Field(
        180, alias="adjustmentIntervalSeconds", ge=10, description="seconds between the planner's scaling decisions"
    )
    prometheus_endpoint: Optional[str] = Field(
        None,
        alias="prometheusEndpoint",
        pattern=allowed_as(r"^https?://[^\s]+$", "an http(s) URL, e.g. http://prometheus.monitoring.svc:9090"),
        description="Prometheus that scrapes the frontend; default with kimi-k3:monitoring.stack install: its own",
    )
    image: Optional[str] = Field(
        None, min_length=1, description="planner image; default: recipes/facts/autoscaling.yaml"
    )

    @field_validator("image")
    @classmethod
    def _planner_pinned(cls, v: Optional[str]) -> Optional[str]:
        from kimi_k3.facts.images import pin_problem

        problem = v is not None and pin_problem(v)
        if problem:
            raise ValueError(f"{problem}; allowed: a version tag or a digest")
        return v

    @field_validator("min_replicas")
    @classmethod
    def _at_least_one(cls, v: dict[str, int]) -> dict[str, int]:
        for role, n in v.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(
                    f"minReplicas.{role} = {n!r}: a graph without one of its roles serves nothing; "
                    "allowed: a whole number >= 1"
                )
        return v


class SpeculationConfig(Strict):
    """`kimi-k3:serving.speculation`: speculative decoding with a drafter staged beside the weights (never the Hub)."""

    method: Literal["dspark"] = Field(description="the drafter (recipes/facts/speculation.yaml drafters)")
    num_speculative_tokens: int = Field(7, alias="numSpeculativeTokens", ge=1, description="draft tokens per step")
    # Pinned like the weights: every stager, check and node copy must see the same bytes.
    drafter_revision: str = Field(
        alias="drafterRevision",
        pattern=allowed_as(r"^[0-9a-f]{40}$", "the 40-hex commit sha of the drafter's Hub repository"),
        description="Hugging Face commit sha (40 hex) of the drafter",
    )


class ServingConfig(Strict):
    """`kimi-k3:serving`: the serving graph's knobs and overrides of the recipe."""

    namespace: str = Field(
        "kimi-k3",
        pattern=allowed_as(DNS_LABEL, "a DNS label: up to 63 lower-case letters, digits and '-', e.g. kimi-k3"),
    )
    image: Optional[str] = Field(None, min_length=1, description="replaces the recipe's runtime image (all roles)")
    runtime_version: Optional[str] = Field(
        None, alias="runtimeVersion", description="semver of the image for runtimeVersionOverride"
    )
    pd_ratio: Optional[str] = Field(
        None,
        alias="pdRatio",
        pattern=allowed_as(r"^[0-9]+:[0-9]+$", 'PREFILL:DECODE replicas as a quoted string, e.g. "1:2"'),
        description="prefill:decode replicas, e.g. 1:2 (disaggregated recipes only)",
    )
    startup_probe_seconds: int = Field(
        7200,
        alias="startupProbeSeconds",
        ge=60,
        description="startup probe budget of each worker (weights load + warmup)",
    )
    ready_timeout_seconds: int = Field(
        14400, alias="readyTimeoutSeconds", ge=60, description="how long `pulumi up` waits for the graph to be Ready"
    )
    download_timeout_seconds: int = Field(
        28800,
        alias="downloadTimeoutSeconds",
        ge=60,
        description="how long `pulumi up` waits for the weights download and check",
    )
    smoke_test: bool = Field(
        True,
        alias="smokeTest",
        description="after the graph is Ready, run the smoke test Job; `pulumi up` fails if it does",
    )
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    frontend: FrontendOverride = Field(default_factory=FrontendOverride)
    roles: dict[str, RoleOverride] = Field(default_factory=dict)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    speculation: Optional[SpeculationConfig] = None
    preflight: PreflightConfig = Field(default_factory=PreflightConfig)
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
