"""Shared vocabulary of the rules: results, context, rule records and helpers over Kubernetes objects."""

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from kimi_k3 import flags, shape
from kimi_k3.facts.platforms import Platform, load_platforms

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
# Pulumi types of filesystems and buckets that hold the model cache outside Kubernetes.
CACHE_FILESYSTEM_TYPES = (
    "aws:fsx/lustreFileSystem:LustreFileSystem",
    "aws:efs/fileSystem:FileSystem",
    "aws:s3/bucket:Bucket",
)
# Resource names ending so hold reproducible compile caches (components/aws/storage.py), not weights.
COMPILE_CACHE_SUFFIX = "-compile-cache"
_WORKLOAD_TEMPLATE_PATHS = {  # where each workload kind keeps its pod spec
    "Pod": ("spec",),
    **{k: ("spec", "template", "spec") for k in ("Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
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
    aws_inputs: Optional[Mapping[str, Any]] = field(default=None, hash=False, compare=False)  # aws:* resources only


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
    """The platform (recipes/facts/platforms.yaml, via the planner's loader) whose GPUs carry this product label."""
    return next((p for p in load_platforms().values() if product is not None and p.gpu_product_label == product), None)


# ---------------------------------------------------------------------------------------- object helpers
def shown(value: Any) -> str:
    """A value inside a message: quoted, or `(not set)` when absent (a message never says a bare None)."""
    return "(not set)" if value is None else repr(value)


def name_of(item: Mapping) -> str:
    """A component's or container's name for a message; `(unnamed)` when the input has none."""
    name = item.get("name") if isinstance(item, Mapping) else None
    return str(name) if name not in (None, "") else "(unnamed)"


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
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
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
        yield f"component {name_of(comp)}", pod_spec(comp)
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


# ---------------------------------------------------------------------------------------- evaluation
SHAPE_RULE = "object-shape-valid"
# Raised by pulumi_policy while a rule reads a value unknown during preview: the pack's protocol, not a crash.
_PASS_THROUGH = ("UnknownValueError", "_NotApplicableError")


def check_object_shape(obj: Mapping, ctx: Context) -> Iterator[Result]:
    """Every field a rule reads has the type the Kubernetes / Dynamo schemas give it (kimi_k3.shape)."""
    for problem in shape.problems(obj):
        yield Finding(safe_target(obj), str(problem))


def safe_target(obj: Any) -> str:
    """target_of for any value: a malformed object still gets a name in the message."""
    if not isinstance(obj, Mapping):
        return f"<{type(obj).__name__}>"
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{obj.get('kind') if isinstance(obj.get('kind'), str) else '?'}/{name if isinstance(name, str) else '?'}"


def _malformed(obj: Any) -> bool:
    try:
        return bool(shape.problems(obj))
    except Exception as exc:  # noqa: BLE001 - a value unknown during preview: the rule decides, as without shape
        if type(exc).__name__ in _PASS_THROUGH:
            return False
        raise


def _crashed(rule: Rule, target: str, exc: Exception) -> Finding:
    if type(exc).__name__ in _PASS_THROUGH:
        raise exc
    # A rule never ends a check with a traceback: it fails, naming itself, the object and what it tripped on.
    return Finding(
        target,
        f"rule {rule.name} could not evaluate this object ({type(exc).__name__}: "
        f"{str(exc)[:200]}); a value in it has a shape the rule does not handle: fix the object, or report "
        "it as a kimi-k3 bug with the object if it is valid Kubernetes",
    )


def evaluate(
    rule: Rule, objects: Sequence[Mapping], ctx: Context, well_formed: bool = False
) -> tuple[list[Violation], list[NotEvaluated]]:
    """One rule over objects. Malformed objects (kimi_k3.shape) reach only the shape rule, which reports them; a
    rule that raises on an object is a violation of that rule naming the object, never a traceback.
    well_formed: the caller has already kept only objects without shape problems."""
    ctx = Context({**rule.defaults(), **ctx.config}, ctx.resources)
    if rule.name != SHAPE_RULE and not well_formed:
        objects = [o for o in objects if not _malformed(o)]
    results: list[Result] = []
    if rule.scope == "stack":
        try:
            results.extend(rule.check(objects, ctx))
        except Exception as exc:  # noqa: BLE001 - reported as a violation, see _crashed
            results.append(_crashed(rule, "stack", exc))
    else:
        for obj in objects:
            try:
                results.extend(rule.check(obj, ctx))
            except Exception as exc:  # noqa: BLE001 - reported as a violation, see _crashed
                results.append(_crashed(rule, safe_target(obj), exc))
    violations = [Violation(rule.name, r.target, r.message, rule.level) for r in results if isinstance(r, Finding)]
    skipped = [NotEvaluated(rule.name, r.target, r.reason) for r in results if isinstance(r, Skipped)]
    return sorted(violations), sorted(skipped)
