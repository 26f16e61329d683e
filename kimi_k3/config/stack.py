"""Typed stack configuration: every `kimi-k3:*` key, validated before any resource is registered.

Secrets (`kimi-k3:hfToken`, `kimi-k3:kubeconfig`) are never read into these models: only whether they are
set. Their values stay Pulumi Outputs and reach Kubernetes through a Secret.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, Optional

from pydantic import Field, ValidationError, field_validator

from kimi_k3.config.base import NAMESPACE, ConfigError, Strict, allowed_as, format_validation_error
from kimi_k3.config.cluster import ClusterConfig
from kimi_k3.config.gke import check_gke_modes
from kimi_k3.config.serving import ServingConfig
from kimi_k3.config.storage import StorageConfig
from kimi_k3.data import recipe_file
from kimi_k3.errors import did_you_mean, shown

# Other config namespaces a stack file may use: the providers this program creates, and Pulumi's own.
OTHER_NAMESPACES = ("aws", "kubernetes", "pulumi")
SECRET_KEYS = ("hfToken", "kubeconfig")


class AddonConfig(Strict):
    """`kimi-k3:platform.<addon>`: install it (a helm release) or assume it present; its pinned chart version."""

    install: Optional[bool] = Field(None, description="default: true in eks mode, false otherwise (assumed present)")
    version: Optional[str] = Field(
        None,
        pattern=allowed_as(r"^v?\d+\.\d+\.\d+([-+][\w.]+)?$", "a chart version, e.g. 1.5.0 or v25.3.4"),
        description="chart version; default: recipes/platform/addons.yaml",
    )
    values: dict[str, Any] = Field(
        default_factory=dict, description="deep-merged over recipes/platform/addons.yaml values"
    )


class PlatformConfig(Strict):
    """`kimi-k3:platform`: the GPU/DRA/Dynamo add-ons the serving graph needs."""

    gpu_operator: AddonConfig = Field(default_factory=AddonConfig, alias="gpuOperator")
    efa_device_plugin: AddonConfig = Field(default_factory=AddonConfig, alias="efaDevicePlugin")
    dra_driver: AddonConfig = Field(default_factory=AddonConfig, alias="draDriver")
    dynamo_platform: AddonConfig = Field(default_factory=AddonConfig, alias="dynamoPlatform")


class EstimatesConfig(Strict):
    """`kimi-k3:estimates`: overrides of recipes/facts/durations.yaml for the critical-path report."""

    download_gbps: Optional[float] = Field(
        None, alias="downloadGbps", gt=0, description="Hugging Face download per fetcher (or download Job), GB/s"
    )
    local_zone_link_gbps: Optional[float] = Field(
        None, alias="localZoneLinkGbps", gt=0, description="Local Zone <-> Region bandwidth for all GPU nodes, GB/s"
    )
    seconds: dict[str, float] = Field(default_factory=dict, description="per-key duration overrides")

    @field_validator("seconds")
    @classmethod
    def _known_steps(cls, v: dict[str, float]) -> dict[str, float]:
        known = sorted(recipe_file("facts/durations.yaml")["seconds"])  # an unknown step would be silently unused
        for step, value in v.items():
            if step not in known:
                raise ValueError(f"unknown step {shown(step)}{did_you_mean(step, known)}; allowed: {', '.join(known)}")
            if value < 0:
                raise ValueError(f"seconds.{step} = {value:g}: a duration; allowed: 0 or more seconds")
        return v


class ModelConfig(Strict):
    """`kimi-k3:model`: which checkpoint, and where it lives in the cache."""

    repo: str = Field(
        "moonshotai/Kimi-K3",
        pattern=allowed_as(r"^[\w.-]+/[\w.-]+$", "a Hugging Face repo id OWNER/NAME, e.g. moonshotai/Kimi-K3"),
    )
    # A commit, never a branch or tag: `main` moves, and every fetcher, check and node copy must see the same bytes.
    revision: Optional[str] = Field(
        None,
        pattern=allowed_as(
            r"^[0-9a-f]{40}$",
            "the 40-hex commit sha of the Hub repository (a branch or tag such as main moves), e.g. the sha `hf api` / the repo's commit history shows",
        ),
        description="Hugging Face commit sha (40 hex); required: the weights are pinned",
    )
    served_model_name: str = Field(
        "moonshotai/Kimi-K3",
        alias="servedModelName",
        pattern=allowed_as(
            r"^[A-Za-z0-9_][A-Za-z0-9_./:-]*$",
            "a model name of letters, digits, '_', '.', '/', ':', '-', e.g. "
            "moonshotai/Kimi-K3 (clients send it as `model`)",
        ),
        max_length=256,
    )
    cache_mount_path: str = Field(
        "/model-cache",
        alias="cacheMountPath",
        pattern=allowed_as(r"^/[\w./-]*$", "an absolute path of letters, digits, '.', '_', '-', e.g. /model-cache"),
    )
    download_image: str = Field(
        "python:3.12.11-slim-bookworm",
        alias="downloadImage",
        description="image for the download Job (Docker Hub official python image)",
    )

    @field_validator("cache_mount_path")
    @classmethod
    def _own_directory(cls, v: str) -> str:
        parts = v.rstrip("/").split("/")[1:]
        if not parts or any(p in ("", ".", "..") for p in parts):
            raise ValueError(
                "allowed: a directory of its own, e.g. /model-cache (not /, no '.', '..' or '//'): "
                "the volume is mounted over it and hides what the image has there"
            )
        if parts[0] in SYSTEM_DIRS:
            raise ValueError(
                f"/{parts[0]} belongs to the image or the kubelet; allowed: a directory of its own, e.g. /model-cache"
            )
        return v

    @field_validator("download_image")
    @classmethod
    def _download_pinned(cls, v: str) -> str:
        from kimi_k3.facts.images import pin_problem

        problem = pin_problem(v)
        if problem:
            raise ValueError(f"{problem}; allowed: a version tag or a digest, e.g. python:3.12.11-slim-bookworm")
        return v

    hub_version: str = Field(
        "1.16.4",
        alias="hubVersion",
        pattern=allowed_as(r"^\d+\.\d+\.\d+$", "a version MAJOR.MINOR.PATCH, e.g. 1.16.4"),
        description="huggingface_hub version the Job installs (upstream model-download.yaml pins 1.16.4)",
    )


# Top-level directories a volume mount would hide or that the kubelet owns (the Linux FHS, Kubernetes' /var/run).
SYSTEM_DIRS = {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "proc", "run", "sbin", "sys", "usr", "var"}


class AlertsConfig(Strict):
    """`kimi-k3:monitoring.alerts`: thresholds of the alert rules (defaults in recipes/platform/monitoring.yaml)."""

    ttft_p95_seconds: Optional[float] = Field(None, alias="ttftP95Seconds", gt=0)
    itl_p95_seconds: Optional[float] = Field(None, alias="itlP95Seconds", gt=0)
    max_queued_requests: Optional[int] = Field(None, alias="maxQueuedRequests", ge=0)
    max_kv_cache_usage_percent: Optional[float] = Field(None, alias="maxKvCacheUsagePercent", gt=0, le=100)


class MonitoringConfig(Strict):
    """`kimi-k3:monitoring`: install kube-prometheus-stack, use the cluster's own, or add nothing."""

    stack: Optional[Literal["install", "existing", "none"]] = Field(
        None,
        description="default: install, except on an existing cluster, whose add-ons (monitoring too) are assumed "
        "present",
    )
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)


class PricingConfig(Strict):
    """`kimi-k3:pricing`: what one GPU instance costs, with where that number comes from."""

    instance_hour_usd: float = Field(alias="instanceHourUsd", gt=0)
    source: str = Field(min_length=1)
    as_of: str = Field(
        alias="asOf",
        pattern=allowed_as(r"^\d{4}-\d{2}(-\d{2})?$", 'a quoted date YYYY-MM or YYYY-MM-DD, e.g. "2026-10"'),
    )


class StackConfig(Strict):
    """Everything under the `kimi-k3:` namespace of a stack."""

    # The seed four (NVIDIA's v1.4.0-kimi-k3-dev.1 profiles), the v1.5.0-kimi-k3-dev.1 vLLM and SGLang ones (recipes/profiles/).
    recipe: Literal[
        "gb200",
        "gb200-disagg",
        "gb300",
        "gb300-disagg",
        "gb200-v1.5",
        "gb300-v1.5",
        "gb300-disagg-v1.5",
        "gb200-sglang",
        "gb200-disagg-sglang",
        "gb300-sglang",
        "gb300-disagg-sglang",
        "h200",
    ]
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    platform: PlatformConfig = Field(default_factory=PlatformConfig)
    # A named set of add-on versions (recipes/platform/platform-set.yaml `sets`); None = `seed`, today's pins.
    platform_set: Optional[str] = Field(None, alias="platformSet", pattern=allowed_as(r"^[\w.-]+$", "a set name"))
    estimates: EstimatesConfig = Field(default_factory=EstimatesConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    serving: ServingConfig = Field(default_factory=ServingConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    pricing: Optional[PricingConfig] = None
    hf_token_set: bool = Field(False, alias="hfToken")
    kubeconfig_set: bool = Field(False, alias="kubeconfig")


def addon_key(field_name: str) -> str:
    """python field name -> the config key: gpu_operator -> gpuOperator."""
    head, *rest = field_name.split("_")
    return head + "".join(p.title() for p in rest)


def check_modes(cfg: StackConfig) -> None:
    """Cross-key rules: storage kind and add-on installs that the cluster mode can honour."""
    kind, mode = cfg.storage.resolved_kind, cfg.cluster.mode
    if cfg.model.revision is None:
        raise ConfigError(
            f"kimi-k3:model.revision: required but not set; allowed: the 40-hex commit sha of "
            f"{cfg.model.repo} to serve (a branch such as main moves, and fetchers, checks and node copies "
            f"would each see other bytes); e.g. pulumi config set --path kimi-k3:model.revision <sha>"
        )
    if kind == "existing" and not cfg.storage.storage_class:
        raise ConfigError(
            "kimi-k3:storage.storageClass: required when kimi-k3:storage.kind is existing; "
            "allowed: the name of a ReadWriteMany StorageClass"
        )
    check_gke_modes(cfg)
    if kind not in ("existing", "gcs") and mode != "eks":
        raise ConfigError(
            f"kimi-k3:storage.kind = {kind!r}: created by this program only in kimi-k3:cluster.mode eks "
            f"(mode is {mode!r}); allowed here: existing, with kimi-k3:storage.storageClass"
            + (", or gcs" if mode == "gke" else "")
        )
    if cfg.cluster.parked and mode != "eks":
        raise ConfigError(
            f"kimi-k3:cluster.parked = true: only eks mode builds (and can park) a cluster; mode is "
            f"{mode!r}; allowed: false (`pulumi destroy` keeps the model-cache PVC and its namespace)"
        )
    if cfg.storage.compile_cache == "efs" and (mode != "eks" or kind == "existing"):
        raise ConfigError(
            f"kimi-k3:storage.compileCache = 'efs': created by this program only in kimi-k3:cluster.mode "
            f"eks with a storage kind it creates (mode {mode!r}, kind {kind!r}); allowed here: none"
        )
    st = cfg.storage
    if kind != "existing" and (st.storage_class or st.provisioner):
        key = "storageClass" if st.storage_class else "provisioner"
        raise ConfigError(
            f"kimi-k3:storage.{key} = {shown(st.storage_class or st.provisioner)}: used only with "
            f"kimi-k3:storage.kind existing; kind {kind!r} creates its own volume and would ignore it; "
            "allowed: remove it, or kind existing"
        )
    for block, owner in (("fsx", "fsx-lustre"), ("efs", "efs"), ("s3", "s3")):
        if block in st.model_fields_set and kind != owner:
            raise ConfigError(
                f"kimi-k3:storage.{block}: settings of storage kind {owner}, but kind is {kind!r} and "
                f"would ignore them; allowed: remove kimi-k3:storage.{block}, or kind {owner}"
            )
    if st.node_local_weights and not st.resolved_node_local_weights(mode):
        raise ConfigError(
            f"kimi-k3:storage.nodeLocalWeights = true: only eks mode, and gke mode with storage kind gcs, know the "
            f"GPU nodes' local disks (mode is {mode!r}, kind {kind!r}); allowed here: false"
        )
    if mode == "eks" and cfg.cluster.efa_devices_per_node is not None:
        raise ConfigError(
            f"kimi-k3:cluster.efaDevicesPerNode = {cfg.cluster.efa_devices_per_node}: eks mode takes "
            "EFA devices from the instance type and would ignore it; allowed: remove it (or mode existing)"
        )
    sv = cfg.serving
    if sv.ready_timeout_seconds < sv.startup_probe_seconds:
        raise ConfigError(
            f"kimi-k3:serving.readyTimeoutSeconds = {sv.ready_timeout_seconds}: `pulumi up` would stop "
            f"waiting before the workers' startup probe (kimi-k3:serving.startupProbeSeconds = "
            f"{sv.startup_probe_seconds}) gives up; allowed: {sv.startup_probe_seconds} or more"
        )
    check_download_timeout(cfg)
    if mode == "render":
        for key, addon in cfg.platform:
            if addon.install:
                raise ConfigError(
                    f"kimi-k3:platform.{addon_key(key)}.install = true: helm releases need a cluster; "
                    "allowed in render mode: false (the add-on is assumed present)"
                )


def check_download_timeout(cfg: StackConfig) -> None:
    """downloadTimeoutSeconds must fit the checkpoint at the rated rate of the download and the storage it fills."""
    from kimi_k3.facts import model as facts_model  # planner reads this module's types

    st, kind = cfg.storage, cfg.storage.resolved_kind
    if kind == "fsx-lustre" and st.fsx.s3_import_path:
        return  # pre-staged: the Job only verifies
    d, facts = recipe_file("facts/durations.yaml"), recipe_file("facts/storage.yaml")
    checkpoint = facts_model.checkpoint_bytes(facts_model.load_model_facts())
    start = 0.0
    if kind == "s3":
        rate = st.s3.fetchers * (cfg.estimates.download_gbps or d["download_gbps"])
        start = {**d["seconds"], **cfg.estimates.seconds}["fetcher_start"]
        what = f"{st.s3.fetchers} fetchers at {cfg.estimates.download_gbps or d['download_gbps']:g} GB/s each"
    else:
        rate = cfg.estimates.download_gbps or d["download_job_gbps"]
        what = f"the download Job at {rate:g} GB/s (recipes/facts/durations.yaml download_job_gbps)"
        if kind == "fsx-lustre":
            fsx = st.fsx.storage_capacity_gib / 1024 * st.fsx.per_unit_storage_throughput / 1000
            if fsx < rate:
                rate, what = (
                    fsx,
                    (
                        f"FSx for Lustre {st.fsx.storage_capacity_gib} GiB x "
                        f"{st.fsx.per_unit_storage_throughput} MB/s per TiB"
                    ),
                )
        elif kind == "efs" and facts["efs"]["per_client_gbps"] < rate:
            rate, what = facts["efs"]["per_client_gbps"], "EFS, per client (recipes/facts/storage.yaml)"
    need = start + checkpoint / (rate * 1e9)
    timeout = cfg.serving.download_timeout_seconds
    if timeout < need:
        raise ConfigError(
            f"kimi-k3:serving.downloadTimeoutSeconds = {timeout}: the {checkpoint / 1e12:.2f} TB "
            f"checkpoint takes at least {need:,.0f} s at {rate:.3g} GB/s ({what}, kimi-k3:storage.kind "
            f"{kind}); allowed: {math.ceil(need)} or more, or a faster storage setting"
        )


def namespaced(config: dict[str, Any], label: str) -> dict[str, Any]:
    """A stack file's `config:` with bare keys in the project's namespace, as Pulumi reads it
    (pulumi/pulumi sdk/go/common/workspace/loaders.go stackConfigNamespacedWithProject)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        full = key if ":" in str(key) else f"{NAMESPACE}:{key}"
        if full in out or (full != key and full in config):  # Pulumi would keep one of the two at random (a Go map)
            raise ConfigError(
                f"{label}: {key!r} and {full!r} are the same key (Pulumi puts a bare key in the "
                "project's namespace); allowed: one of them"
            )
        out[full] = value
    return out


def parse_stack_config(raw: dict[str, Any], secret_keys: set[str]) -> StackConfig:
    """Validate a `{"kimi-k3:key": value}` mapping (values may be JSON strings, as Pulumi passes them).

    `secret_keys` are the full keys the engine marks secret: a token set without `--secret` is rejected."""
    fields: dict[str, Any] = {}
    for full_key, value in sorted(raw.items()):
        ns, _, key = full_key.partition(":")
        if ns not in (NAMESPACE, *OTHER_NAMESPACES):
            # A misspelt project namespace would drop the whole block and silently fall back to defaults.
            raise ConfigError(
                f"{full_key}: unknown config namespace {ns!r}{did_you_mean(ns, [NAMESPACE])}; "
                f"allowed: {NAMESPACE} (this project), {', '.join(OTHER_NAMESPACES)}"
            )
        if ns != NAMESPACE:
            continue
        if key in SECRET_KEYS:
            if value not in (None, "") and full_key not in secret_keys:
                raise ConfigError(
                    f"{full_key}: stored in plaintext; remove it and run `pulumi config set --secret {full_key} ...`"
                )
            fields[key] = value not in (None, "")
            continue
        if isinstance(value, str) and value.startswith(("{", "[")):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{full_key}: not valid JSON/YAML structure ({exc})") from None
        fields[key] = value
    try:
        cfg = StackConfig.model_validate(fields)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, StackConfig)) from None
    check_modes(cfg)
    aws_region = raw.get("aws:region")  # the AWS provider's region; every AWS resource lands there
    if cfg.cluster.mode == "eks" and aws_region and aws_region != cfg.cluster.region:
        raise ConfigError(
            f"{NAMESPACE}:cluster.region = {cfg.cluster.region!r}: differs from aws:region = "
            f"{aws_region!r}, where the AWS provider creates everything; set both to the same region"
        )
    if not cfg.hf_token_set:
        raise ConfigError(
            f"{NAMESPACE}:hfToken: required but not set; run `pulumi config set --secret {NAMESPACE}:hfToken hf_...` "
            "(a Hugging Face read token; it is stored encrypted and reaches the cluster only as a Secret)"
        )
    return cfg


def stack_mode(cfg: Any) -> str:
    """install | existing | none: kimi-k3:monitoring.stack, by default install except on an existing cluster."""
    return cfg.monitoring.stack or ("existing" if cfg.cluster.mode == "existing" else "install")
