"""The serving graph: recipe data + stack overrides -> roles, TP, nodes, flags, env (pure, no Pulumi)."""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Literal, Optional

from pydantic import Field, ValidationError, field_validator

from .data import recipe_file
from .images import NODE_ARCHES, image_facts, image_tag, kube_arch, names_runtime_version, pin_problem
from .aws import efa_devices_per_node, load_aws_facts
from . import flags as argv_flags
from .planner import Platform, aligned_block_size, load_model_facts, load_platforms, memory_fit
from .config import (
    ConfigError, FlagValue, Quantity, StackConfig, Strict, allowed_as, format_validation_error,
)

SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
# Flags the graph derives from typed fields: set them through their config keys, not extraArgs.
DERIVED_WORKER_FLAGS = {
    "--model": "kimi-k3:model", "--served-model-name": "kimi-k3:model.servedModelName",
    "--tensor-parallel-size": "kimi-k3:serving.roles.<role>.tp",
    "--gpu-memory-utilization": "kimi-k3:serving.roles.<role>.gpuMemoryUtilization",
    "--kv-cache-dtype": "the recipe's kvCacheDtype", "--max-model-len": "the recipe's maxModelLen",
    "--block-size": "vLLM's aligned hybrid block (planner.aligned_block_size)", "--kv-events-config": "the recipe's publishesKvEvents",
    "--decode-context-parallel-size": "kimi-k3:serving.roles.<role>.dcp",
}
DERIVED_FRONTEND_FLAGS = {"--kv-cache-block-size": "the workers' --block-size (planner.aligned_block_size)",
                          "--migration-limit": "kimi-k3:serving.frontend.migrationLimit (default: recipes/request-migration.yaml)"}
# Dynamo's bounds for --migration-limit (frontend_args.py validate(): a u32; 0 = migration off).
MIGRATION_LIMIT_MAX = 2**32 - 1


class RoleRecipe(Strict):
    component: str = Field(pattern=allowed_as(r"^[A-Za-z][A-Za-z0-9]*$", "letters and digits, starting with a letter, e.g. DecodeWorker"))
    type: Literal["prefill", "decode", "worker"]
    tp: int = Field(ge=1)
    replicas: int = Field(ge=0)
    gpu_memory_utilization: float = Field(alias="gpuMemoryUtilization", gt=0, le=1)
    shared_memory_size: Quantity = Field(alias="sharedMemorySize")
    publishes_kv_events: bool = Field(alias="publishesKvEvents")
    cpu: Optional[str] = None
    memory: Optional[Quantity] = None
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict)


class FrontendRecipe(Strict):
    replicas: int = Field(1, ge=1)
    cpu: Optional[str] = None
    memory: Optional[Quantity] = None
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict)


class WorkerRecipe(Strict):
    pod_annotations: dict[str, str] = Field(default_factory=dict, alias="podAnnotations")
    args: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, Optional[str]] = Field(default_factory=dict)


class Recipe(Strict):
    platform: Literal["gb200", "gb300"]
    image: str
    runtime_version: Optional[str] = Field(None, alias="runtimeVersion")
    # Optional: derived per role (vllm_block_size); a value vLLM would raise is refused, not rendered.
    block_size: Optional[int] = Field(None, alias="blockSize", ge=1)
    max_model_len: int = Field(alias="maxModelLen", ge=1)
    kv_cache_dtype: Literal["fp8", "bf16", "auto"] = Field(alias="kvCacheDtype")
    kv_events_port: int = Field(alias="kvEventsPort", ge=1024, le=65535)
    # How disaggregated KV moves between prefill and decode: `nvlink` (NIXL default UCX backend, cuda_ipc over MNNVL,
    # every role in one ComputeDomain), `efa` (NIXL LIBFABRIC backend, workers request the node's EFA devices, needs
    # an EFA runtime image), or `auto`: NVLink when the whole graph fits one NVLink domain, else EFA.
    kv_transport: Literal["auto", "nvlink", "efa"] = Field("auto", alias="kvTransport")
    frontend: FrontendRecipe
    worker: WorkerRecipe
    roles: dict[str, RoleRecipe]

    @field_validator("max_model_len")
    @classmethod
    def _within_model(cls, v: int) -> int:
        most = recipe_file("model.yaml")["text"]["max_position_embeddings"]
        if v > most:  # vLLM refuses a max_model_len past the model's max_position_embeddings
            raise ValueError(f"beyond Kimi K3's max_position_embeddings {most:,} (recipes/model.yaml); allowed: 1..{most}")
        return v


@dataclass(frozen=True)
class Role:
    """One worker role (a DGD component): `replicas` TP groups of `nodes_per_replica` pods, one pod per node."""

    key: str
    component: str
    type: str
    tp: int
    gpus_per_node: int
    nodes_per_replica: int
    replicas: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_model_len: int
    shared_memory_size: str
    publishes_kv_events: bool
    cpu: Optional[str]
    memory: Optional[str]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    pod_annotations: tuple[tuple[str, str], ...]
    efa_devices: int = 0          # vpc.amazonaws.com/efa per pod (KV transport over EFA), 0 = none
    # Pods sharing this group share one NVLink clique: every TP group needs one; roles that hand KV over
    # NVLink need the same one. With KV over EFA, each role may sit in its own clique (e.g. two x36 racks).
    nvlink_group: str = ""
    dcp: int = 1                  # vLLM decode context parallel size (recipes/dcp.yaml)
    # Subdirectory of the shared compile-cache volume this role's pods mount (one per image + flags), "" = none.
    compile_cache_key: str = ""
    # Key of the ComputeDomain (IMEX domain) this role claims: roles that hand KV over NVLink share one, since a
    # pod cannot import memory exported in another IMEX domain (NVIDIA DRA driver docs).
    compute_domain: str = ""

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas

    @property
    def nodes(self) -> int:
        return self.nodes_per_replica * self.replicas


@dataclass(frozen=True)
class Frontend:
    component: str
    replicas: int
    cpu: Optional[str]
    memory: Optional[str]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    http_port: int
    arch: tuple[str, ...] = NODE_ARCHES    # kubernetes.io/arch values the frontend may run on (its image's)
    # The GPU nodes' zone where it is known (eks: kimi-k3:cluster.gpuNodes.availabilityZone): the frontend (and its
    # KV router) runs beside the workers, so requests, streamed tokens and KV events never cross a zone link.
    zone: Optional[str] = None


@dataclass(frozen=True)
class ServingGraph:
    stack: str
    recipe: str
    name: str
    namespace: str
    platform: Platform
    image: str
    runtime_version: Optional[str]
    block_size: int
    model_repo: str
    model_revision: str
    served_model_name: str
    cache_mount_path: str
    model_path: str
    frontend: Frontend
    roles: tuple[Role, ...]
    startup_probe_seconds: int
    ready_timeout_seconds: int
    download_timeout_seconds: int
    compile_cache: bool = False     # workers mount the shared compile-cache volume (kimi-k3:storage.compileCache)
    node_local_weights: bool = False   # workers load a node-local NVMe copy (kimi-k3:storage.nodeLocalWeights)
    kv_transport: str = "nvlink"          # nvlink | efa (resolved from the recipe and the topology)
    kv_transport_reason: str = ""
    download_arch: tuple[str, ...] = NODE_ARCHES   # kubernetes.io/arch values the download image runs on
    side_arch: tuple[str, ...] = NODE_ARCHES   # kubernetes.io/arch of the nodes controllers run on (eks: system nodes)
    autoscaling: Any = None         # kimi_k3.autoscaling.Autoscaling when the SLA planner owns worker replicas

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.roles)

    @property
    def compute_domains(self) -> tuple[str, ...]:
        """The ComputeDomain keys roles claim, each once, in role order."""
        return tuple(dict.fromkeys(r.compute_domain for r in self.roles))

    @property
    def frontend_service(self) -> str:
        # The Dynamo operator names a component's Service <graph>-<component, lower case>.
        return f"{self.name}-{self.frontend.component.lower()}"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge maps key by key; a `None` value removes the key."""
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def _recipe_data(name: str) -> dict[str, Any]:
    raw = recipe_file(f"{name}.yaml")
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    base = dict(_recipe_data(base_name))
    base.pop("roles")  # a derived recipe states its roles whole
    return merge(base, raw)


def load_recipe(name: str) -> Recipe:
    try:
        return Recipe.model_validate(_recipe_data(name))
    except ValidationError as err:  # a broken recipe file is a bug in this repo, reported like config errors
        raise ConfigError(f"recipes/{name}.yaml: " + format_validation_error(err)) from None


def flag_list(flags: dict[str, FlagValue]) -> tuple[str, ...]:
    out: list[str] = []
    for flag, value in flags.items():
        if value is True:
            out.append(flag)
        elif value is not False and value is not None:
            out += [flag, str(value)]
    return tuple(out)


def _check_overridable(flags: dict[str, FlagValue], derived: dict[str, str], key: str) -> None:
    for flag in flags:
        if flag in derived:
            raise ConfigError(f"{key}: {flag} is derived by the graph; set {derived[flag]} instead")


def _resolve_image(recipe: Recipe, cfg: StackConfig) -> tuple[str, Optional[str]]:
    image = cfg.serving.image or recipe.image
    if pin_problem(image):
        raise ConfigError(f"kimi-k3:serving.image = {image!r}: pin a version tag or digest (no 'latest', no untagged image)")
    version = cfg.serving.runtime_version or (recipe.runtime_version if cfg.serving.image is None else None)
    if version is None and not names_runtime_version(image):
        raise ConfigError(f"kimi-k3:serving.runtimeVersion: required because image tag {image_tag(image)!r} is not "
                          "semver (the Dynamo operator needs runtimeVersionOverride), e.g. 1.4.0")
    if version is not None and not SEMVER.match(version):
        raise ConfigError(f"kimi-k3:serving.runtimeVersion = {version!r}: must be semver MAJOR.MINOR.PATCH")
    return image, version


def _replicas(recipe: Recipe, cfg: StackConfig) -> dict[str, int]:
    replicas = {key: r.replicas for key, r in recipe.roles.items()}
    if cfg.serving.pd_ratio is not None:
        if set(recipe.roles) != {"prefill", "decode"}:
            raise ConfigError(f"kimi-k3:serving.pdRatio = {cfg.serving.pd_ratio!r}: only for disaggregated recipes "
                              "(gb200-disagg, gb300-disagg)")
        prefill, decode = (int(x) for x in cfg.serving.pd_ratio.split(":"))
        replicas.update(prefill=prefill, decode=decode)
    for key, over in cfg.serving.roles.items():
        if over.replicas is None:
            continue
        if cfg.serving.pd_ratio is not None:
            raise ConfigError(f"kimi-k3:serving.roles.{key}.replicas: conflicts with kimi-k3:serving.pdRatio; set one")
        replicas[key] = over.replicas
    for key, n in replicas.items():
        if n < 1:  # a graph without one of its roles starts, and then serves nothing (no worker, or no decode)
            where = (f"kimi-k3:serving.pdRatio = {cfg.serving.pd_ratio!r}" if cfg.serving.pd_ratio is not None
                     else f"kimi-k3:serving.roles.{key}.replicas = {n}")
            raise ConfigError(f"{where}: every role of recipe {cfg.recipe} needs at least 1 replica ({key} has {n}); "
                              "allowed: 1 or more (to stop paying for GPUs, set "
                              "kimi-k3:cluster.gpuNodes.desiredNodes = 0 or run pulumi destroy, which keeps the weights)")
    return replicas


def _divides_heads(tp: int) -> bool:
    m = load_model_facts()
    return m.kda_heads % tp == 0 and m.mla_heads % tp == 0


def allowed_tps(platform: Platform, util: float, kv_dtype: str, max_len: int) -> list[int]:
    """Every TP a role may use on this platform: whole nodes, >= 2 nodes (Dynamo multinode), within one NVLink
    domain, dividing the attention heads, and fitting weights plus one max-length request (the planner)."""
    gpn = platform.gpus_per_node
    out = []
    for nodes in range(2, platform.nvlink_domain_nodes + 1):
        tp = nodes * gpn
        if _divides_heads(tp) and memory_fit(platform.name, tp, gpu_memory_utilization=util,
                                             kv_cache_dtype=kv_dtype, max_model_len=max_len)[0]:
            out.append(tp)
    return out


def _topology(key: str, recipe_role: RoleRecipe, over, platform: Platform, util: float, kv_dtype: str,
              max_len: int) -> tuple[int, int]:
    """(tp, nodes per replica), checked: whole nodes, multinode (>= 2 nodes), within one NVLink domain, dividing
    the heads, fitting in memory. Every message lists the TPs that pass all of these checks."""
    where = f"kimi-k3:serving.roles.{key}"
    gpn = platform.gpus_per_node
    tp = over.tp if over and over.tp is not None else None
    nodes = over.nodes_per_replica if over and over.nodes_per_replica is not None else None
    if tp is None and nodes is not None:
        tp = nodes * gpn
    tp = tp if tp is not None else recipe_role.tp

    def allowed() -> str:
        return f"allowed on {platform.name}: {', '.join(map(str, allowed_tps(platform, util, kv_dtype, max_len)))}"

    if tp % gpn:
        raise ConfigError(f"{where}.tp = {tp}: must be a multiple of {gpn} (GPUs per {platform.name} node), "
                          f"so every pod takes a whole node; {allowed()}")
    derived_nodes = tp // gpn
    if nodes is not None and nodes != derived_nodes:
        raise ConfigError(f"{where}.nodesPerReplica = {nodes}: TP{tp} on {platform.name} spans {derived_nodes} nodes "
                          f"of {gpn} GPUs; set tp = nodesPerReplica x {gpn}")
    if derived_nodes < 2:
        raise ConfigError(f"{where}.tp = {tp}: gives multinode nodeCount {derived_nodes}; Dynamo multinode needs "
                          f"nodeCount >= 2 (TP >= {2 * gpn} on {platform.name}); {allowed()}")
    if derived_nodes > platform.nvlink_domain_nodes:
        raise ConfigError(f"{where}.tp = {tp}: spans {derived_nodes} nodes, more than one NVLink domain holds "
                          f"({platform.nvlink_domain_nodes} {platform.name} nodes); {allowed()}")
    if not _divides_heads(tp):
        m = load_model_facts()
        raise ConfigError(f"{where}.tp = {tp}: must divide Kimi K3's {m.mla_heads} attention heads "
                          f"({m.kda_heads} KDA, {m.mla_heads} MLA); {allowed()}")
    fits, why = memory_fit(platform.name, tp, gpu_memory_utilization=util, kv_cache_dtype=kv_dtype,
                           max_model_len=max_len)  # the planner's memory model is also the policy pack's fit rule
    if not fits:
        raise ConfigError(f"{where}.tp = {tp}: {why}; use a larger TP ({allowed()})")
    return tp, derived_nodes


def _kv_over_efa(flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
    """Select NIXL's LIBFABRIC backend in --kv-transfer-config (over EFA, UCX would fall back to TCP)."""
    raw = flags.get("--kv-transfer-config")
    if not isinstance(raw, str):
        return flags
    conf = json.loads(raw)
    if conf.get("kv_connector") != "NixlConnector":
        return flags
    extra = dict(conf.get("kv_connector_extra_config") or {})
    extra["backends"] = ["LIBFABRIC"]
    conf["kv_connector_extra_config"] = extra
    return {**flags, "--kv-transfer-config": json.dumps(conf, separators=(",", ":"))}


GRAPH_NAME = "kimi-k3"


def _dcp(key: str, role_type: str, tp: int, over, flags: dict[str, FlagValue], image: str) -> int:
    """The role's decode context parallel size, refused where vLLM refuses it (recipes/dcp.yaml)."""
    dcp = over.dcp if over and over.dcp is not None else 1
    if dcp == 1:
        return 1
    facts = recipe_file("dcp.yaml")
    where = f"kimi-k3:serving.roles.{key}.dcp = {dcp}"
    if role_type not in facts["roles"]:
        raise ConfigError(f"{where}: decode context parallelism only applies to roles that decode "
                          f"({', '.join(facts['roles'])}); {key} is a {role_type} role")
    if tp % dcp:
        raise ConfigError(f"{where}: must divide the role's tp {tp} (vLLM splits the TP group into DCP groups)")
    if flags.get("--speculative-config") not in (None, False):
        if not facts["speculative_with_dcp_by_image"].get(image, False):
            raise ConfigError(f"{where}: the vLLM in {image} does not run Kimi K3 speculative decoding with decode "
                              "context parallelism (recipes/dcp.yaml: ai-dynamo/dynamo#12843, vllm-project/vllm#53673); "
                              "drop --speculative-config or set dcp: 1")
        if str(flags.get(facts["interleave_flag"], "1")) != "1":
            raise ConfigError(f"{where}: vLLM refuses speculative decoding with {facts['interleave_flag']} > 1 "
                              "(vllm/v1/worker/cp_utils.py); leave it at 1")
    return dcp


def nvlink_domain_nodes(cfg: StackConfig, platform: Platform) -> tuple[int, str]:
    """Nodes one NVLink domain holds where the graph runs, and why: on EKS one UltraServer."""
    if cfg.cluster.mode == "eks":
        n = cfg.cluster.gpu_nodes.ultra_server_nodes
        return n, f"one UltraServer of kimi-k3:cluster.gpuNodes.ultraServerNodes = {n} instances"
    return platform.nvlink_domain_nodes, f"one {platform.name} NVL72 rack of {platform.nvlink_domain_nodes} nodes"


def choose_kv_transport(recipe: Recipe, cfg: StackConfig, platform: Platform, image: str,
                        role_nodes: dict[str, int]) -> tuple[str, str]:
    """(`nvlink` | `efa`, why): NVLink when prefill and decode fit one NVLink domain, EFA (with an EFA image) only
    when they cannot. Aggregated graphs move no KV between roles: NVLink (their TP groups need it anyway)."""
    disagg = {"prefill", "decode"} <= {r.type for r in recipe.roles.values()}
    total = sum(role_nodes.values())
    domain, where = nvlink_domain_nodes(cfg, platform)
    fits = total <= domain
    if not disagg:
        return "nvlink", "aggregated: no KV moves between roles"
    if cfg.cluster.mode == "eks" and not fits:
        # eks mode runs a graph inside one UltraServer; kimi_k3.aws.gpu_node_plan refuses this config with the
        # node-group reason (and the UltraServer size that would fit) right after this, before anything exists.
        return "nvlink", f"prefill + decode = {total} nodes exceed {where} (refused by the GPU node plan)"
    wanted = recipe.kv_transport
    if wanted == "nvlink" and not fits:
        raise ConfigError(f"kimi-k3:serving: prefill and decode take {total} GPU nodes, more than {where}; "
                          "KV cannot stay on NVLink (recipe kvTransport: nvlink). Lower the replicas "
                          "(kimi-k3:serving.pdRatio / roles.<role>.replicas) or use a recipe with kvTransport: auto")
    if wanted == "nvlink" or (wanted == "auto" and fits):
        return "nvlink", f"prefill + decode = {total} nodes fit {where}: KV over NVLink (one ComputeDomain)"
    if not image_facts(image).efa:
        raise ConfigError(f"kimi-k3:serving.image = {image!r}: KV must cross EFA (prefill + decode = {total} nodes, "
                          f"more than {where}), which needs a Dynamo EFA runtime image (vllm-runtime:<version>-efa, "
                          "recipes/images.yaml); none is published for the Kimi K3 build. Allowed: an -efa image, or "
                          "fewer replicas so prefill and decode fit one NVLink domain")
    return "efa", f"prefill + decode = {total} nodes exceed {where}: KV over EFA (NIXL LIBFABRIC)"


def _check_image_arch(image: str, arches: set[str], key: str, where: str) -> tuple[str, ...]:
    """The kubernetes.io/arch values pods of this image may use; an error when the nodes they need are not one."""
    known = image_facts(image).arch
    if known is None:
        return tuple(sorted(arches))      # unknown image: nothing to narrow (the rule reports "not evaluated")
    usable = known & arches
    if not usable:
        raise ConfigError(f"{key} = {image!r}: built for {', '.join(sorted(known))} (recipes/images.yaml) but "
                          f"{where} are {', '.join(sorted(arches))}; allowed: an image built for "
                          f"{' or '.join(sorted(arches))}")
    return tuple(sorted(usable))


def build_graph(stack: str, cfg: StackConfig) -> ServingGraph:
    recipe = load_recipe(cfg.recipe)
    # One name whatever the recipe: a DynamoGraphDeployment whose name changes is replaced, not patched, and the
    # operator then starts a second worker generation beside the first (ai-dynamo/dynamo#13495).
    name = GRAPH_NAME
    platform = load_platforms()[recipe.platform]
    unknown = sorted(set(cfg.serving.roles) - set(recipe.roles))
    if unknown:
        raise ConfigError(f"kimi-k3:serving.roles.{unknown[0]}: no such role in recipe {cfg.recipe}; "
                          f"allowed: {', '.join(sorted(recipe.roles))}")
    image, runtime_version = _resolve_image(recipe, cfg)
    # A staged rollout (docs/operating.md#rollouts) adds replicas to every worker role; the node group follows.
    replicas = {key: n + cfg.serving.rollout.surge for key, n in _replicas(recipe, cfg).items()}
    compile_cache = cfg.storage.resolved_compile_cache(cfg.cluster.mode) != "none"
    topology = {}
    for key, rr in recipe.roles.items():
        over = cfg.serving.roles.get(key)
        util = over.gpu_memory_utilization if over and over.gpu_memory_utilization else rr.gpu_memory_utilization
        topology[key] = _topology(key, rr, over, platform, util, recipe.kv_cache_dtype, recipe.max_model_len)
    transport, transport_reason = choose_kv_transport(
        recipe, cfg, platform, image, {key: nodes * replicas[key] for key, (_, nodes) in topology.items()})
    efa = efa_devices_per_node(cfg, platform.name) if transport == "efa" else 0
    if transport == "efa" and not efa:
        raise ConfigError(f"kimi-k3:cluster.efaDevicesPerNode: KV moves over EFA ({transport_reason}) but the GPU "
                          "nodes offer no EFA devices; set it (existing clusters) or use eks mode")
    shared_domain = transport == "nvlink" and len(recipe.roles) > 1
    # No pod may land where its image cannot run: workers on the GPU nodes' arch, the frontend in the workers'
    # zone (eks: only the GPU nodes are there), the download Job on what its image is built for (eks: system nodes).
    gpu_arch = {kube_arch(platform.arch)}
    _check_image_arch(image, gpu_arch, "kimi-k3:serving.image", f"{platform.name} GPU nodes")
    side_arches = set(NODE_ARCHES)
    side_where = "the nodes"
    frontend_zone = None
    if cfg.cluster.mode == "eks":
        system_ami = cfg.cluster.system_nodes.ami_type
        side_arches = {kube_arch(load_aws_facts().ami_types.get(system_ami, "unknown"))}
        side_where = f"system nodes (kimi-k3:cluster.systemNodes.amiType = {system_ami})"
        frontend_zone = cfg.cluster.gpu_nodes.availability_zone
    # The frontend may run on any node of the workers' zone its image is built for: GPU nodes (tolerated) or others.
    frontend_arch = _check_image_arch(image, set(NODE_ARCHES), "kimi-k3:serving.image (frontend)", "the nodes")
    download_arch = _check_image_arch(cfg.model.download_image, side_arches, "kimi-k3:model.downloadImage",
                                      side_where)
    model_path = f"{cfg.model.cache_mount_path.rstrip('/')}/{cfg.model.repo}"
    prestaged = cfg.storage.resolved_kind == "fsx-lustre" and bool(cfg.storage.fsx.s3_import_path)
    if cfg.model.revision != "main" and not prestaged:
        # Each pinned revision downloads into its own directory, beside the one the graph is serving from.
        model_path += f"@{cfg.model.revision}"
    base_env = {
        "MODEL_PATH": model_path,
        "SERVED_MODEL_NAME": cfg.model.served_model_name,
        "HF_HUB_OFFLINE": "1",          # weights come only from the verified cache, never the Hub
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_ENGINE_READY_TIMEOUT_S": str(cfg.serving.startup_probe_seconds),
    }
    roles = []
    for key, rr in recipe.roles.items():
        over = cfg.serving.roles.get(key)
        util = over.gpu_memory_utilization if over and over.gpu_memory_utilization else rr.gpu_memory_utilization
        tp, nodes = topology[key]
        extra = over.extra_args if over else {}
        _check_overridable(extra, DERIVED_WORKER_FLAGS, f"kimi-k3:serving.roles.{key}.extraArgs")
        typed: dict[str, FlagValue] = {
            # Literal values, never $(VAR): the operator shell-quotes multinode args into `sh -c` for non-leader
            # pods (`$` -> `\$`) after kubelet has expanded $(VAR), so they would get `\/model-cache/...`.
            "--model": model_path, "--served-model-name": cfg.model.served_model_name,
            "--tensor-parallel-size": tp, "--gpu-memory-utilization": util,
            "--kv-cache-dtype": recipe.kv_cache_dtype, "--max-model-len": recipe.max_model_len,
            "--block-size": 0,  # set below from the role's final flags (vllm_block_size)
        }
        events = {"--kv-events-config": (
            '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:%d","enable_kv_cache_events":true}'
            % recipe.kv_events_port)} if rr.publishes_kv_events else {}
        flags = merge(merge(merge(merge(typed, recipe.worker.args), rr.args), events), extra)
        dcp = _dcp(key, rr.type, tp, over, flags, image)
        if dcp > 1:
            flags = merge(flags, {"--decode-context-parallel-size": dcp})
        if efa:
            flags = _kv_over_efa(flags)
        block = vllm_block_size(flag_list(flags))
        if recipe.block_size is not None and recipe.block_size != block:
            raise ConfigError(f"recipes/{cfg.recipe}.yaml: blockSize = {recipe.block_size}: vLLM runs role {key} "
                              f"(TP{tp}, prefix caching {'on' if _prefix_caching(flag_list(flags)) else 'off'}) "
                              f"with {block}-token blocks and hashes prefixes and publishes KV events in them; "
                              f"allowed: {block}, or leave blockSize out (derived)")
        flags["--block-size"] = block
        env = merge(merge(merge(base_env, recipe.worker.env), rr.env), over.env if over else {})
        cache_key = compile_cache_key(image, flag_list(flags)) if compile_cache else ""
        if compile_cache:
            env = merge(env, compile_cache_env())
        roles.append(Role(
            key=key, component=rr.component, type=rr.type, tp=tp, gpus_per_node=platform.gpus_per_node,
            nodes_per_replica=nodes, replicas=replicas[key], gpu_memory_utilization=util,
            kv_cache_dtype=recipe.kv_cache_dtype, max_model_len=recipe.max_model_len,
            shared_memory_size=(over.shared_memory_size if over and over.shared_memory_size else rr.shared_memory_size),
            publishes_kv_events=rr.publishes_kv_events, cpu=rr.cpu, memory=rr.memory,
            args=flag_list(flags), env=tuple(env.items()),
            pod_annotations=tuple(sorted(recipe.worker.pod_annotations.items())),
            efa_devices=efa,
            dcp=dcp,
            compile_cache_key=cache_key,
            nvlink_group=name if transport == "nvlink" else f"{name}-{key}",
            compute_domain="nvlink" if shared_domain else key,
        ))
    # Roles of one TP share one block (every shipped stack); with mixed TP the frontend flag names the first role's,
    # and Dynamo's router still routes each worker set by the block its model card registers (watcher.rs).
    block_size = int(role_flag(roles[0], "--block-size"))
    fe = cfg.serving.frontend
    _check_overridable(fe.extra_args, DERIVED_FRONTEND_FLAGS, "kimi-k3:serving.frontend.extraArgs")
    migration = fe.migration_limit if fe.migration_limit is not None else default_migration_limit()
    fe_flags = merge(merge(recipe.frontend.args, {"--kv-cache-block-size": block_size, "--migration-limit": migration}),
                     fe.extra_args)
    http_port = int(fe_flags.get("--http-port", 8000))
    frontend = Frontend(
        component="Frontend", replicas=fe.replicas or recipe.frontend.replicas,
        cpu=recipe.frontend.cpu, memory=recipe.frontend.memory, args=flag_list(fe_flags),
        env=tuple(merge(merge({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, recipe.frontend.env), fe.env).items()),
        http_port=http_port, arch=frontend_arch, zone=frontend_zone,
    )
    graph = ServingGraph(
        stack=stack, recipe=cfg.recipe, name=name, namespace=cfg.serving.namespace,
        platform=platform, image=image, runtime_version=runtime_version, block_size=block_size,
        model_repo=cfg.model.repo, model_revision=cfg.model.revision, served_model_name=cfg.model.served_model_name,
        cache_mount_path=cfg.model.cache_mount_path.rstrip("/"), model_path=model_path,
        frontend=frontend, roles=tuple(roles),
        startup_probe_seconds=cfg.serving.startup_probe_seconds,
        ready_timeout_seconds=cfg.serving.ready_timeout_seconds,
        download_timeout_seconds=cfg.serving.download_timeout_seconds,
        compile_cache=compile_cache,
        node_local_weights=cfg.storage.resolved_node_local_weights(cfg.cluster.mode),
        kv_transport=transport, kv_transport_reason=transport_reason, download_arch=download_arch,
        side_arch=tuple(sorted(side_arches)),
    )
    if cfg.serving.autoscaling.enabled:  # the SLA planner: bounds, config and profile data (kimi_k3/autoscaling.py)
        from .autoscaling import resolve
        graph = replace(graph, autoscaling=resolve(cfg, graph))
    return graph


def compile_cache_spec() -> dict[str, Any]:
    return recipe_file("compile_cache.yaml")


def default_migration_limit() -> int:
    """How many times the frontend may move one in-flight request to another worker (recipes/request-migration.yaml)."""
    value = (recipe_file("request-migration.yaml") or {}).get("migrationLimit")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MIGRATION_LIMIT_MAX:
        raise ConfigError(f"recipes/request-migration.yaml: migrationLimit = {value!r}: allowed: an integer from 0 "
                          f"to {MIGRATION_LIMIT_MAX} (Dynamo's --migration-limit; 0 turns migration off)")
    return value


def compile_cache_key(image: str, args: tuple[str, ...]) -> str:
    """One cache directory per image + worker flags (issue 15): artifacts built by another image or for other
    shapes and kernels are never picked up, and the pods of a role share theirs. Settings passed by environment are
    left to the caches' own keys (vLLM hashes its config and env into the torch.compile cache path; Triton,
    DeepGEMM and FlashInfer key each kernel by its source and parameters)."""
    payload = json.dumps({"image": image, "args": list(args)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def compile_cache_env() -> dict[str, str]:
    """Cache locations under the mount; the mount itself is the role's keyed subdirectory (subPath), so a changed
    flag changes one line of the pod, not every variable."""
    spec = compile_cache_spec()
    return {name: f"{spec['mount_path']}/{sub}" for name, sub in spec["env"].items()}


def role_flag(role: "Role", flag: str, default: Optional[str] = None) -> Optional[str]:
    """The value a role's worker gets for `flag` (the last one wins, as in argparse)."""
    value = default
    for i, arg in enumerate(role.args[:-1]):
        if arg == flag:
            value = role.args[i + 1]
    return value


def role_prefix_caching(role: "Role") -> bool:
    """Whether a role's vLLM caches prefixes: the last of the two flags wins; neither = vLLM V1's default, on."""
    return _prefix_caching(role.args)


def _prefix_caching(tokens) -> bool:
    flags = [a for a in tokens if a in ("--enable-prefix-caching", "--no-enable-prefix-caching")]
    return not flags or flags[-1] == "--enable-prefix-caching"


def vllm_block_size(tokens) -> int:
    """The block vLLM runs a Kimi K3 worker with, from its argv: a smaller --block-size is raised to it
    (_align_hybrid_block_size), and prefix hashes, KV events and Dynamo's model card all use it."""
    tp = int(argv_flags.flag_value(tokens, "--tensor-parallel-size") or 1)
    dtype = argv_flags.flag_value(tokens, "--kv-cache-dtype") or "auto"
    spec = json.loads(argv_flags.flag_value(tokens, "--speculative-config") or "{}")
    return aligned_block_size(tp, kv_cache_dtype="bf16" if dtype == "auto" else dtype,
                              spec_tokens=int(spec.get("num_speculative_tokens", 0) or 0),
                              prefix_caching=_prefix_caching(tokens))


def cache_size_gi(cfg: StackConfig, checkpoint_bytes: int) -> int:
    """PVC size: configured, or the checkpoint plus headroom, rounded up to whole GiB."""
    if cfg.storage.size_gi is not None:
        return cfg.storage.size_gi
    return math.ceil(checkpoint_bytes * (1 + cfg.storage.headroom_percent / 100) / 2**30)
