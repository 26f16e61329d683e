"""Deployment rules for Dynamo + vLLM graphs: pure functions over Kubernetes objects.

One implementation, two front ends: the CrossGuard pack (`policies/__main__.py`) and the offline
checker (`kimi-k3 check`). Importing this module has no side effects.

A rule is either object-scoped (looks at one object at a time; the pack runs it in `Analyze`) or
stack-scoped (needs several objects or Pulumi resource options; the pack runs it in `AnalyzeStack`).
Each check yields `Finding` (a violation) or `Skipped` (the rule could not be evaluated, with why).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union


from kimi_k3 import flags
from kimi_k3.images import image_tag, names_runtime_version, pin_problem
from kimi_k3.manifests import EFA_RESOURCE as EFA
from kimi_k3.planner import Platform, load_platforms, memory_fit

MANDATORY = "mandatory"
ADVISORY = "advisory"

GPU = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
GPUS_ANNOTATION = "kimi-k3.io/gpus"
HF_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
REMOVED_FLAGS = ("--is-prefill-worker", "--is-decode-worker")
WORKER_TYPES = ("worker", "prefill", "decode")
# Kubernetes probe defaults (core/v1 Probe) used when a startupProbe omits a field.
PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "failureThreshold": 3}
# Default load budget: ~1.56 TB checkpoint read per TP group plus CuTeDSL/cudagraph warm-up; ~1 h.
DEFAULT_MIN_STARTUP_SECONDS = 3600
# Pulumi types of filesystems that hold the model cache outside Kubernetes.
CACHE_FILESYSTEM_TYPES = ("aws:fsx/lustreFileSystem:LustreFileSystem", "aws:efs/fileSystem:FileSystem")
_WORKLOAD_TEMPLATE_PATHS = {
    "Pod": ("spec",),
    "Job": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


# ---------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Finding:
    target: str
    message: str


@dataclass(frozen=True)
class Skipped:
    target: str
    reason: str


@dataclass(frozen=True, order=True)
class Violation:
    rule: str
    target: str
    message: str
    level: str


@dataclass(frozen=True, order=True)
class NotEvaluated:
    rule: str
    target: str
    reason: str


@dataclass(frozen=True)
class ResourceInfo:
    """What Pulumi knows about a resource beyond its inputs; retain_on_delete None = not visible."""

    type: str
    name: str
    key: Optional[str]  # "Kind/name" for Kubernetes resources
    protect: bool
    retain_on_delete: Optional[bool]
    gpu_pool_nodes: Optional[int] = None  # max size of an EKS node group running the NVIDIA AMI


@dataclass(frozen=True)
class Context:
    config: Mapping[str, Any] = field(default_factory=dict)
    resources: Optional[Sequence[ResourceInfo]] = None  # None: only manifests are known


Result = Union[Finding, Skipped]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    level: str
    scope: str  # "object" | "stack"
    check: Callable[..., Iterable[Result]]
    config_schema: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def defaults(self) -> dict[str, Any]:
        return {k: v["default"] for k, v in self.config_schema.items() if "default" in v}


# ---------------------------------------------------------------------------------------- facts
def platform_for_product(product: Optional[str]) -> Optional[Platform]:
    """The platform (recipes/platforms.yaml, via the planner's loader) whose GPUs carry this product label."""
    return next((p for p in load_platforms().values() if product is not None and p.gpu_product_label == product), None)


# ---------------------------------------------------------------------------------------- object helpers
def target_of(obj: Mapping) -> str:
    return f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"


def _is(obj: Mapping, kind: str) -> bool:
    return obj.get("kind") == kind


def components(obj: Mapping) -> list[Mapping]:
    if not _is(obj, "DynamoGraphDeployment"):
        return []
    return list((obj.get("spec") or {}).get("components") or [])


def pod_spec(component: Mapping) -> Mapping:
    return ((component.get("podTemplate") or {}).get("spec")) or {}


def main_container(component: Mapping) -> Optional[Mapping]:
    containers = pod_spec(component).get("containers") or []
    return next((c for c in containers if c.get("name") == "main"), containers[0] if containers else None)


def node_count(component: Mapping) -> int:
    return int(((component.get("multinode") or {}).get("nodeCount")) or 1)


def replicas(component: Mapping) -> int:
    value = component.get("replicas")
    return 1 if value is None else int(value)


def gpus(container: Optional[Mapping]) -> int:
    res = (container or {}).get("resources") or {}
    value = (res.get("limits") or {}).get(GPU, (res.get("requests") or {}).get(GPU, 0))
    return int(value)


def gpu_product(spec: Mapping) -> Optional[str]:
    """The GPU product a pod is pinned to by nodeSelector or a single-valued required node affinity."""
    selected = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if selected:
        return selected
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    values = {
        v
        for term in required.get("nodeSelectorTerms") or []
        for expr in term.get("matchExpressions") or []
        if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In"
        for v in expr.get("values") or []
    }
    return values.pop() if len(values) == 1 else None


def serving(container: Optional[Mapping]) -> tuple[list[str], Optional[str]]:
    """(serving tokens, module) of a container, e.g. (['python3', '-m', 'dynamo.vllm', ...], 'dynamo.vllm')."""
    tokens = flags.server_argv(container or {})
    return tokens, flags.module(tokens)


def workers(obj: Mapping) -> Iterator[tuple[Mapping, Mapping, list[str]]]:
    """(component, main container, tokens) for every component that runs dynamo.vllm."""
    for comp in components(obj):
        container = main_container(comp)
        tokens, mod = serving(container)
        if mod == "dynamo.vllm":
            yield comp, container, tokens


def frontends(obj: Mapping) -> Iterator[tuple[Mapping, Mapping, list[str]]]:
    for comp in components(obj):
        container = main_container(comp)
        tokens, mod = serving(container)
        if mod == "dynamo.frontend":
            yield comp, container, tokens


def _int_flag(tokens: Sequence[str], name: str, default: int) -> int:
    value = flags.flag_value(tokens, name)
    return int(value) if value is not None else default


def _json_flag(tokens: Sequence[str], name: str) -> Mapping[str, Any]:
    """A JSON-valued vLLM flag merged with its dotted form (`--name.key value`)."""
    raw = flags.flag_value(tokens, name)
    try:
        parsed = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        parsed = {}
    merged = dict(parsed) if isinstance(parsed, dict) else {}
    for key, value in flags.dotted_values(tokens, name).items():
        merged[key.rstrip("+")] = value
    return merged


def pod_specs(obj: Mapping) -> Iterator[tuple[str, Mapping]]:
    """(label, pod spec) of every pod template an object carries."""
    for comp in components(obj):
        yield f"component {comp.get('name')}", pod_spec(comp)
    path = _WORKLOAD_TEMPLATE_PATHS.get(obj.get("kind", ""))
    if path and not components(obj):
        node: Any = obj
        for key in path:
            node = (node or {}).get(key)
        if node:
            yield "pod", node


def all_containers(spec: Mapping) -> Iterator[Mapping]:
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def model_mount(container: Mapping, spec: Mapping, path: str) -> Optional[tuple[Mapping, Mapping]]:
    """(volumeMount, volume) of the deepest mount holding `path`, or None."""
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    best = None
    for mount in container.get("volumeMounts") or []:
        mount_path = str(mount.get("mountPath", "")).rstrip("/") or "/"
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            if best is None or len(mount_path) > len(best[0].get("mountPath", "")):
                best = (mount, volumes.get(mount.get("name"), {}))
    return best


def model_arg(tokens: Sequence[str]) -> Optional[str]:
    return flags.flag_value(tokens, "--model") or flags.flag_value(tokens, "--model-path")


def resolved_model(container: Mapping, tokens: Sequence[str]) -> tuple[Optional[str], Optional[str]]:
    """(raw --model value, value after Kubernetes and shell expansion or None when unresolvable)."""
    raw = model_arg(tokens)
    if raw is None:
        return None, None
    env = flags.container_env(container)
    return raw, flags.resolve(raw, env, shell=flags.shell_script(container) is not None)


# ---------------------------------------------------------------------------------------- topology
def check_tp_spans_whole_nodes(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        tp = _int_flag(tokens, "--tensor-parallel-size", 1)
        pp = _int_flag(tokens, "--pipeline-parallel-size", 1)
        per_pod, nodes = gpus(container), node_count(comp)
        if tp * pp != nodes * per_pod:
            yield Finding(target_of(obj), f"component {comp.get('name')}: TP {tp} x PP {pp} = {tp * pp} GPUs, "
                          f"but {nodes} node(s) x {per_pod} GPUs per pod = {nodes * per_pod}")


def check_pods_take_whole_nodes(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, _ in workers(obj):
        if node_count(comp) < 2:
            continue
        product = gpu_product(pod_spec(comp))
        found = platform_for_product(product)
        if found is None:
            yield Skipped(target_of(obj), f"component {comp.get('name')}: GPU product {product!r} not in "
                          "recipes/platforms.yaml (pin it with nodeSelector/nodeAffinity on nvidia.com/gpu.product)")
            continue
        if gpus(container) != found.gpus_per_node:
            yield Finding(target_of(obj), f"component {comp.get('name')}: multinode pod requests {gpus(container)} "
                          f"GPUs; a {found.name} node has {found.gpus_per_node}")


def check_multinode_claims_compute_domain(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    templates = {
        ((o.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate", {}).get("name")
        for o in objects if _is(o, "ComputeDomain")
    }
    for obj in objects:
        for comp in components(obj):
            if node_count(comp) < 2:
                continue
            where = f"component {comp.get('name')}"
            spec, container = pod_spec(comp), main_container(comp) or {}
            claims = {c.get("name"): c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or []}
            used = [c.get("name") for c in (container.get("resources") or {}).get("claims") or []]
            channel = [n for n in used if claims.get(n) in templates]
            if not channel:
                yield Finding(target_of(obj), f"{where}: container main claims {sorted(used)} and the pod's "
                              f"resourceClaims map to {sorted(filter(None, claims.values()))}; none is a ComputeDomain "
                              f"channel template (known: {sorted(filter(None, templates))})")
            for name in used:
                if name not in claims:
                    yield Finding(target_of(obj), f"{where}: container claim {name!r} has no pod resourceClaims entry")


def check_tp_group_pinned_to_clique(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        if node_count(comp) < 2:
            continue
        affinity = (pod_spec(comp).get("affinity") or {}).get("podAffinity") or {}
        terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        if not any(t.get("topologyKey") == CLIQUE_LABEL for t in terms):
            yield Finding(target_of(obj), f"component {comp.get('name')}: {node_count(comp)}-node TP group has no "
                          f"required podAffinity on {CLIQUE_LABEL}; its pods may land in different NVLink domains")


def check_tp_group_fits_nvlink_domain(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        if node_count(comp) < 2:
            continue
        product = gpu_product(pod_spec(comp))
        found = platform_for_product(product)
        if found is None:
            yield Skipped(target_of(obj), f"component {comp.get('name')}: GPU product {product!r} unknown")
            continue
        if node_count(comp) > found.nvlink_domain_nodes:
            yield Finding(target_of(obj), f"component {comp.get('name')}: {node_count(comp)} nodes per TP group; "
                          f"one {found.name} NVLink domain holds {found.nvlink_domain_nodes}")


def gpu_nodes(obj: Mapping) -> int:
    return sum(replicas(c) * node_count(c) for c in components(obj) if gpus(main_container(c)) > 0)


def check_graph_fits_node_pool(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    """Pool size: policy config, else the GPU node groups the same stack creates."""
    pool, source = ctx.config.get("gpu_node_pool_nodes"), "policy config gpu_node_pool_nodes"
    groups = [r.gpu_pool_nodes for r in ctx.resources or [] if r.gpu_pool_nodes is not None]
    if pool is None and groups:
        pool, source = sum(groups), "the stack's GPU node group max size"
    for obj in objects:
        if not components(obj):
            continue
        if pool is None:
            yield Skipped(target_of(obj), "GPU node pool size unknown (policy config gpu_node_pool_nodes, "
                          "or a GPU node group in the same stack)")
        elif gpu_nodes(obj) > int(pool):
            yield Finding(target_of(obj), f"graph needs {gpu_nodes(obj)} GPU nodes; the pool has {pool} ({source})")


def check_gpu_totals_match_recipe(obj: Mapping, ctx: Context) -> Iterator[Result]:
    expected = ((obj.get("metadata") or {}).get("annotations") or {}).get(GPUS_ANNOTATION)
    if not components(obj):
        return
    if expected is None:
        yield Skipped(target_of(obj), f"no {GPUS_ANNOTATION} annotation: no recipe total to compare with")
        return
    total = sum(replicas(c) * node_count(c) * gpus(main_container(c)) for c in components(obj))
    if total != int(expected):
        yield Finding(target_of(obj), f"components request {total} GPUs (replicas x nodes x GPUs per pod); "
                      f"the recipe computed {expected}")


# vLLM --kv-cache-dtype values -> the planner's dtype names ("auto" is the checkpoint's bf16).
_KV_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def check_model_fits_at_tp(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        where = f"component {comp.get('name')}"
        found = platform_for_product(gpu_product(pod_spec(comp)))
        if found is None:
            yield Skipped(target_of(obj), f"{where}: GPU product unknown")
            continue
        tp = _int_flag(tokens, "--tensor-parallel-size", 1)
        kwargs: dict[str, Any] = {
            "dcp": _int_flag(tokens, "--decode-context-parallel-size", 1),
            "kv_cache_dtype": _KV_DTYPES.get(flags.flag_value(tokens, "--kv-cache-dtype") or "auto", "bf16")}
        if flags.flag_value(tokens, "--gpu-memory-utilization"):
            kwargs["gpu_memory_utilization"] = float(flags.flag_value(tokens, "--gpu-memory-utilization"))
        if flags.flag_value(tokens, "--max-model-len"):
            kwargs["max_model_len"] = int(flags.flag_value(tokens, "--max-model-len"))
        try:
            fits, reason = memory_fit(found.name, tp, **kwargs)
        except ValueError as exc:  # the planner rejects layouts the model cannot run in (e.g. TP not dividing heads)
            fits, reason = False, str(exc)
        if not fits:
            yield Finding(target_of(obj), f"{where}: {reason}")


# ---------------------------------------------------------------------------------------- model path and cache
def _env_ref_problems(container: Mapping) -> Iterator[tuple[str, bool]]:
    """(message, provable) for every variable reference the container's env does not define."""
    env = flags.container_env(container)
    for text in flags.raw_argv(container):
        for name in flags.kube_refs(text):
            if name not in env:
                yield f"$({name}) has no env entry; Kubernetes passes the literal text '$({name})'", False
    script = flags.shell_script(container)
    for name in flags.shell_refs(script or ""):
        if name not in env:
            yield f"shell script reads ${{{name}}} which no env entry defines", False


def _env_refs(obj: Mapping, with_env_from: bool) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            if bool(container.get("envFrom")) != with_env_from:
                continue
            for message, _ in _env_ref_problems(container):
                suffix = " (envFrom may define it: cannot be proven)" if with_env_from else ""
                yield Finding(target_of(obj), f"{label} container {container.get('name')}: {message}{suffix}")


def check_env_refs_resolve(obj: Mapping, ctx: Context) -> Iterator[Result]:
    return _env_refs(obj, with_env_from=False)


def check_env_refs_provable(obj: Mapping, ctx: Context) -> Iterator[Result]:
    return _env_refs(obj, with_env_from=True)


def _is_placeholder(value: str) -> bool:
    return value.strip() in ("", "MODEL_PATH") or value.startswith("$")


def check_model_path_under_cache_mount(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in spec.get("containers") or []:
            tokens, _ = serving(container)
            raw, value = resolved_model(container, tokens)
            if raw is None:
                continue
            where = f"{label} container {container.get('name')}"
            if value is None or _is_placeholder(value):
                yield Finding(target_of(obj), f"{where}: model path {raw!r} does not resolve to a value")
            elif not value.startswith("/"):
                yield Finding(target_of(obj), f"{where}: model {value!r} (from {raw!r}) is not an absolute path; "
                              "a Hub id makes every cold start depend on the Hub and the cache layout")
            else:
                found = model_mount(container, spec, value)
                volume = found[1] if found else {}
                if not (volume.get("persistentVolumeClaim") or volume.get("hostPath")):
                    yield Finding(target_of(obj), f"{where}: model path {value} is not under a volumeMount of a "
                                  "model-cache volume (PVC or hostPath)")


def check_roles_agree_on_model(obj: Mapping, ctx: Context) -> Iterator[Result]:
    seen: dict[tuple[Optional[str], Optional[str]], list[str]] = {}
    for comp, container, tokens in workers(obj):
        _, path = resolved_model(container, tokens)
        served_raw = flags.flag_value(tokens, "--served-model-name")
        env = flags.container_env(container)
        served = flags.resolve(served_raw, env, flags.shell_script(container) is not None) if served_raw else path
        seen.setdefault((path, served), []).append(str(comp.get("name")))
    if len(seen) > 1:
        described = "; ".join(f"{', '.join(names)} -> path {p!r}, served as {s!r}" for (p, s), names in sorted(
            seen.items(), key=lambda kv: kv[1]))
        yield Finding(target_of(obj), f"workers disagree on the model: {described}")


def check_model_cache_read_only(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        _, value = resolved_model(container, tokens)
        found = model_mount(container, pod_spec(comp), value) if value and value.startswith("/") else None
        if found and not found[0].get("readOnly"):
            yield Finding(target_of(obj), f"component {comp.get('name')}: model-cache mount "
                          f"{found[0].get('mountPath')} is writable; workers only read weights")


# ---------------------------------------------------------------------------------------- KV transport and routing
def _component_type(comp: Mapping) -> str:
    return str(comp.get("type") or comp.get("componentType") or "").lower()


def check_disagg_roles_use_nixl(obj: Mapping, ctx: Context) -> Iterator[Result]:
    types = {_component_type(c) for c in components(obj)}
    if not {"prefill", "decode"} <= types:
        return
    for comp, _, tokens in workers(obj):
        role = _component_type(comp)
        if role not in ("prefill", "decode"):
            continue
        where = f"component {comp.get('name')} ({role})"
        mode = flags.flag_value(tokens, "--disaggregation-mode")
        if mode != role:
            yield Finding(target_of(obj), f"{where}: --disaggregation-mode is {mode!r}, expected {role!r}")
        connector = _json_flag(tokens, "--kv-transfer-config").get("kv_connector")
        if connector != "NixlConnector":
            yield Finding(target_of(obj), f"{where}: --kv-transfer-config kv_connector is {connector!r}, "
                          "expected 'NixlConnector'")


def check_no_removed_flags(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, _, tokens in workers(obj):
        for removed in REMOVED_FLAGS:
            if flags.has_flag(tokens, removed):
                yield Finding(target_of(obj), f"component {comp.get('name')}: {removed} was removed; use "
                              "--disaggregation-mode")


def _ucx_excludes_cuda_ipc(tls: str) -> bool:
    items = [t.strip() for t in tls.split(",") if t.strip()]
    if items and items[0].startswith("^"):
        excluded = {items[0][1:], *items[1:]}
        return bool(excluded & {"cuda_ipc", "cuda"})
    return not (set(items) & {"all", "cuda", "cuda_ipc"})


def check_ucx_settings_consistent(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            env = flags.container_env(container)
            tls, mnnvl = env.get("UCX_TLS"), env.get("UCX_CUDA_IPC_ENABLE_MNNVL")
            if tls and mnnvl and mnnvl.lower() in ("y", "yes", "1", "true", "on") and _ucx_excludes_cuda_ipc(tls):
                yield Finding(target_of(obj), f"{label} container {container.get('name')}: UCX_TLS={tls} excludes "
                              "cuda_ipc while UCX_CUDA_IPC_ENABLE_MNNVL=y; KV transfer leaves NVLink for RDMA/TCP")


def _requests_efa(container: Mapping) -> bool:
    res = container.get("resources") or {}
    return any(EFA in (res.get(k) or {}) for k in ("limits", "requests"))


def check_efa_uses_libfabric(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp, container, tokens in workers(obj):
        config = _json_flag(tokens, "--kv-transfer-config")
        if not _requests_efa(container) or config.get("kv_connector") != "NixlConnector":
            continue
        extra = config.get("kv_connector_extra_config") or {}
        backends = extra.get("backends") if isinstance(extra, dict) else None
        dotted = config.get("kv_connector_extra_config.backends")
        names = [str(b).upper() for b in (backends or [])] + ([str(dotted).upper()] if dotted else [])
        if "LIBFABRIC" not in names:
            yield Finding(target_of(obj), f"component {comp.get('name')}: requests {EFA} but NIXL backends are "
                          f"{names or ['UCX (default)']}; set kv_connector_extra_config.backends to ['LIBFABRIC']")


def check_frontend_block_size_matches_workers(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for fe, _, fe_tokens in frontends(obj):
        router_block = flags.flag_value(fe_tokens, "--kv-cache-block-size")
        if router_block is None:
            continue
        for comp, _, tokens in workers(obj):
            block = flags.flag_value(tokens, "--block-size")
            if block is None:
                yield Finding(target_of(obj), f"component {comp.get('name')}: no --block-size while frontend "
                              f"{fe.get('name')} routes with --kv-cache-block-size {router_block}; vLLM's default "
                              "(16 on CUDA, raised to the attention backend's kernel block, e.g. 64 for MLA) "
                              "cannot be proven equal")
            elif block != router_block:
                yield Finding(target_of(obj), f"component {comp.get('name')}: --block-size {block} != frontend "
                              f"{fe.get('name')} --kv-cache-block-size {router_block}")


def _publishes_kv_events(tokens: Sequence[str]) -> bool:
    config = _json_flag(tokens, "--kv-events-config")
    enabled = str(config.get("enable_kv_cache_events", "")).lower() == "true"
    return enabled and str(config.get("publisher", "zmq")).lower() != "null"


def check_kv_router_has_kv_events(obj: Mapping, ctx: Context) -> Iterator[Result]:
    disagg = {"prefill", "decode"} <= {_component_type(c) for c in components(obj)}
    for fe, _, fe_tokens in frontends(obj):
        approximate = flags.has_flag(fe_tokens, "--no-router-kv-events") or flags.has_flag(fe_tokens, "--no-kv-events")
        if flags.flag_value(fe_tokens, "--router-mode") != "kv" or approximate:
            continue
        for comp, _, tokens in workers(obj):
            # Disaggregated: prefix hits are realised where the prompt is computed, the prefill role.
            routed = _component_type(comp) == "prefill" if disagg else True
            if routed and not _publishes_kv_events(tokens):
                yield Finding(target_of(obj), f"component {comp.get('name')}: frontend {fe.get('name')} uses "
                              "--router-mode kv but this worker publishes no KV events "
                              "(--kv-events-config with enable_kv_cache_events true)")


# ---------------------------------------------------------------------------------------- safety
def check_images_pinned(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            problem = pin_problem(container.get("image"))
            if problem:
                yield Finding(target_of(obj), f"{label} container {container.get('name')}: {problem}")


def check_runtime_version_declared(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for comp in components(obj):
        image = (main_container(comp) or {}).get("image") or ""
        if names_runtime_version(image) or comp.get("runtimeVersionOverride"):
            continue
        yield Finding(target_of(obj), f"component {comp.get('name')}: image tag {image_tag(image)!r} is not a plain "
                      "MAJOR.MINOR.PATCH Dynamo version (a pre-release orders before its release); "
                      "set runtimeVersionOverride")


def check_hf_token_from_secret(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            for entry in container.get("env") or []:
                if entry.get("name") in HF_TOKEN_VARS and "value" in entry:
                    yield Finding(target_of(obj), f"{label} container {container.get('name')}: {entry['name']} is "
                                  "a literal env value; use valueFrom.secretKeyRef or envFrom a Secret")


def check_serving_containers_unprivileged(obj: Mapping, ctx: Context) -> Iterator[Result]:
    for label, spec in pod_specs(obj):
        for container in all_containers(spec):
            if (container.get("securityContext") or {}).get("privileged"):
                yield Finding(target_of(obj), f"{label} container {container.get('name')}: privileged")


def check_startup_budget_covers_load(obj: Mapping, ctx: Context) -> Iterator[Result]:
    need = int(ctx.config.get("min_startup_seconds", DEFAULT_MIN_STARTUP_SECONDS))
    for comp, container, _ in workers(obj):
        probe = container.get("startupProbe")
        if probe is None:
            yield Finding(target_of(obj), f"component {comp.get('name')}: no startupProbe; loading takes ~{need} s")
            continue
        p = {**PROBE_DEFAULTS, **probe}
        budget = int(p["initialDelaySeconds"]) + int(p["periodSeconds"]) * int(p["failureThreshold"])
        if budget < need:
            yield Finding(target_of(obj), f"component {comp.get('name')}: startup budget {budget} s < {need} s "
                          "estimated load time")


def model_cache_claims(objects: Sequence[Mapping]) -> set[str]:
    """Claim names of PVC volumes that hold a worker's model path."""
    claims = set()
    for obj in objects:
        for comp, container, tokens in workers(obj):
            _, value = resolved_model(container, tokens)
            found = model_mount(container, pod_spec(comp), value) if value and value.startswith("/") else None
            pvc = (found[1].get("persistentVolumeClaim") or {}) if found else {}
            if pvc.get("claimName"):
                claims.add(pvc["claimName"])
    return claims


def check_model_cache_retained(objects: Sequence[Mapping], ctx: Context) -> Iterator[Result]:
    claims = model_cache_claims(objects)
    if not claims:
        return
    if ctx.resources is None:
        for claim in sorted(claims):
            yield Skipped(f"PersistentVolumeClaim/{claim}", "only manifests known: protect/retainOnDelete need "
                          "Pulumi resource options (check a stack or a render directory with resources.json)")
        return
    by_key = {r.key: r for r in ctx.resources if r.key}
    pvcs = [(claim, by_key.get(f"PersistentVolumeClaim/{claim}")) for claim in sorted(claims)]
    for claim, res in pvcs:
        if res is None:
            yield Finding(f"PersistentVolumeClaim/{claim}", "model-cache claim is not managed by this stack")
    cache = [res for _, res in pvcs if res] + [r for r in ctx.resources if r.type in CACHE_FILESYSTEM_TYPES]
    for res in cache:
        if res is None or res.protect or res.retain_on_delete:
            continue
        target = res.key or f"{res.type}/{res.name}"
        if res.retain_on_delete is None:
            yield Skipped(target, "not protected, and retainOnDelete is not visible to a policy pack")
        else:
            yield Finding(target, "model cache is neither protect nor retainOnDelete: a destroy deletes ~1.5 TB "
                          "of weights")


# ---------------------------------------------------------------------------------------- registry
def _rule(name: str, description: str, check: Callable[..., Iterable[Result]], level: str = MANDATORY,
          scope: str = "object", config_schema: Optional[Mapping[str, Mapping[str, Any]]] = None) -> Rule:
    return Rule(name, description, level, scope, check, config_schema or {})


RULES: tuple[Rule, ...] = (
    _rule("tp-spans-whole-nodes", "A worker's TP x PP equals nodes per replica x GPUs per pod.",
          check_tp_spans_whole_nodes),
    _rule("pods-take-whole-nodes", "Multinode worker pods request all GPUs of their node.",
          check_pods_take_whole_nodes),
    _rule("multinode-claims-compute-domain", "Multinode workers claim a channel of an existing ComputeDomain.",
          check_multinode_claims_compute_domain, scope="stack"),
    _rule("tp-group-pinned-to-clique", "Multinode TP groups need required podAffinity on nvidia.com/gpu.clique.",
          check_tp_group_pinned_to_clique),
    _rule("tp-group-fits-nvlink-domain", "A TP group spans no more nodes than one NVLink domain holds.",
          check_tp_group_fits_nvlink_domain),
    _rule("graph-fits-node-pool", "The graph's GPU nodes fit the GPU node pool.", check_graph_fits_node_pool,
          scope="stack", config_schema={"gpu_node_pool_nodes": {"type": "integer", "minimum": 0,
                                                 "description": "Nodes in the GPU node pool"}}),
    _rule("gpu-totals-match-recipe", "GPUs requested equal the recipe's total (kimi-k3.io/gpus annotation).",
          check_gpu_totals_match_recipe),
    _rule("model-fits-at-tp", "Weights plus one max-length request fit in GPU memory at the worker's TP (planner).",
          check_model_fits_at_tp),
    _rule("env-refs-resolve", "Every $(VAR) and shell ${VAR} a container uses is defined in its env.",
          check_env_refs_resolve),
    _rule("env-refs-provable", "Variable references that only envFrom could define cannot be proven.",
          check_env_refs_provable, level=ADVISORY),
    _rule("model-path-under-cache-mount", "--model resolves to an absolute path under a model-cache mount.",
          check_model_path_under_cache_mount),
    _rule("roles-agree-on-model", "All workers serve the same model path under the same served name.",
          check_roles_agree_on_model),
    _rule("model-cache-mounted-read-only", "Workers mount the model cache read-only.",
          check_model_cache_read_only),
    _rule("disagg-roles-use-nixl", "Prefill/decode roles set --disaggregation-mode and the NixlConnector.",
          check_disagg_roles_use_nixl),
    _rule("no-removed-flags", "Workers use no removed vLLM flags (--is-prefill-worker, --is-decode-worker).",
          check_no_removed_flags),
    _rule("ucx-settings-consistent", "UCX_TLS does not exclude cuda_ipc while UCX_CUDA_IPC_ENABLE_MNNVL=y.",
          check_ucx_settings_consistent),
    _rule("efa-uses-libfabric", "Workers on EFA select NIXL's LIBFABRIC backend.", check_efa_uses_libfabric),
    _rule("frontend-block-size-matches-workers", "Frontend --kv-cache-block-size equals workers' --block-size.",
          check_frontend_block_size_matches_workers),
    _rule("kv-router-has-kv-events", "With --router-mode kv, the routed workers publish KV events.",
          check_kv_router_has_kv_events),
    _rule("images-pinned", "Container images carry a tag other than latest, or a digest.", check_images_pinned),
    _rule("runtime-version-declared", "A non-semver Dynamo image tag comes with runtimeVersionOverride.",
          check_runtime_version_declared),
    _rule("hf-token-from-secret", "HF tokens come from a Secret, never a literal env value.",
          check_hf_token_from_secret),
    _rule("serving-containers-unprivileged", "No container runs privileged.",
          check_serving_containers_unprivileged),
    _rule("startup-budget-covers-load", "Worker startup probe budget covers the estimated model load time.",
          check_startup_budget_covers_load, level=ADVISORY,
          config_schema={"min_startup_seconds": {"type": "integer", "minimum": 0,
                                                 "default": DEFAULT_MIN_STARTUP_SECONDS,
                                                 "description": "Seconds a worker needs to load and warm up"}}),
    _rule("model-cache-retained", "The model-cache PVC and filesystem are protect or retainOnDelete.",
          check_model_cache_retained, scope="stack"),
)
RULES_BY_NAME = {r.name: r for r in RULES}


# ---------------------------------------------------------------------------------------- evaluation
def evaluate(rule: Rule, objects: Sequence[Mapping], ctx: Context) -> tuple[list[Violation], list[NotEvaluated]]:
    ctx = Context({**rule.defaults(), **ctx.config}, ctx.resources)
    results: list[Result] = []
    if rule.scope == "stack":
        results.extend(rule.check(objects, ctx))
    else:
        for obj in objects:
            results.extend(rule.check(obj, ctx))
    violations = [Violation(rule.name, r.target, r.message, rule.level) for r in results if isinstance(r, Finding)]
    skipped = [NotEvaluated(rule.name, r.target, r.reason) for r in results if isinstance(r, Skipped)]
    return sorted(violations), sorted(skipped)


def run_all(objects: Sequence[Mapping], resources: Optional[Sequence[ResourceInfo]] = None,
            config: Optional[Mapping[str, Mapping[str, Any]]] = None) -> tuple[list[Violation], list[NotEvaluated]]:
    """Every rule over a set of objects; config maps rule name -> that rule's policy config."""
    violations: list[Violation] = []
    skipped: list[NotEvaluated] = []
    for rule in RULES:
        v, s = evaluate(rule, objects, Context((config or {}).get(rule.name, {}), resources))
        violations += v
        skipped += s
    return violations, skipped


# ---------------------------------------------------------------------------------------- Pulumi adapters
def _api_version(type_token: str) -> Optional[tuple[str, str]]:
    """`kubernetes:core/v1:PersistentVolumeClaim` -> ('v1', 'PersistentVolumeClaim')."""
    parts = type_token.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or "/" not in parts[1]:
        return None
    group, version = parts[1].split("/", 1)
    return (version if group == "core" else f"{group}/{version}"), parts[2]


def object_from_resource(type_token: str, props: Mapping[str, Any], name: str) -> Optional[dict]:
    """The Kubernetes object a Pulumi Kubernetes resource's inputs describe (None for other providers)."""
    api = _api_version(type_token)
    if api is None:
        return None
    obj = dict(props)
    obj.setdefault("apiVersion", api[0])
    obj.setdefault("kind", api[1])
    metadata = dict(obj.get("metadata") or {})
    metadata.setdefault("name", name)
    obj["metadata"] = metadata
    return obj


def resource_info(type_token: str, name: str, props: Mapping[str, Any], protect: bool,
                  retain_on_delete: Optional[bool]) -> ResourceInfo:
    obj = object_from_resource(type_token, props, name)
    pool = None
    if type_token == "aws:eks/nodeGroup:NodeGroup" and "NVIDIA" in str(props.get("amiType", "")):
        pool = (props.get("scalingConfig") or {}).get("maxSize")
    return ResourceInfo(type_token, name, target_of(obj) if obj else None, protect, retain_on_delete,
                        int(pool) if pool is not None else None)
