"""The serving graph: recipe data + stack overrides -> roles, TP, nodes, flags, env (pure, no Pulumi)."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Optional

from kimi_k3.aws.nodes import efa_devices_per_node
from kimi_k3.config.base import ConfigError, FlagValue
from kimi_k3.config.cluster import check_provided_compute_domain
from kimi_k3.config.stack import StackConfig
from kimi_k3.data import recipe_file
from kimi_k3.facts.aws import load_aws_facts
from kimi_k3.facts.images import NODE_ARCHES, image_facts, image_tag, kube_arch, names_runtime_version, pin_problem
from kimi_k3.facts.platforms import load_platforms
from kimi_k3.facts.vllm_flags import kv_cache_dtype_flag
from kimi_k3.graph.compile_cache import compile_cache_env, compile_cache_key
from kimi_k3.graph.kv_transport import _kv_over_efa, choose_kv_transport
from kimi_k3.graph.model import Frontend, ProvidedDomain, Role, ServingGraph
from kimi_k3.graph.recipe import (
    DERIVED_FRONTEND_FLAGS,
    DERIVED_WORKER_FLAGS,
    Recipe,
    _check_overridable,
    flag_list,
    load_recipe,
    merge,
)
from kimi_k3.graph.sglang_role import sglang_role as _sglang_role
from kimi_k3.graph.speculation import resolve as resolve_speculation
from kimi_k3.graph.topology import role_topology
from kimi_k3.graph.worker_fields import role_fields
from kimi_k3.names import GRAPH_NAME

SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
# Dynamo's bounds for --migration-limit (frontend_args.py validate(): a u32; 0 = migration off).
MIGRATION_LIMIT_MAX = 2**32 - 1


def _resolve_image(recipe: Recipe, cfg: StackConfig) -> tuple[str, Optional[str]]:
    image = cfg.serving.image or recipe.image
    if pin_problem(image):
        raise ConfigError(
            f"kimi-k3:serving.image = {image!r}: pin a version tag or digest (no 'latest', no untagged image)"
        )
    version = cfg.serving.runtime_version or (recipe.runtime_version if cfg.serving.image is None else None)
    if version is None and not names_runtime_version(image):
        raise ConfigError(
            f"kimi-k3:serving.runtimeVersion: required because image tag {image_tag(image)!r} is not "
            "semver (the Dynamo operator needs runtimeVersionOverride), e.g. 1.4.0"
        )
    if version is not None and not SEMVER.match(version):
        raise ConfigError(f"kimi-k3:serving.runtimeVersion = {version!r}: must be semver MAJOR.MINOR.PATCH")
    return image, version


def _replicas(recipe: Recipe, cfg: StackConfig) -> dict[str, int]:
    replicas = {key: r.replicas for key, r in recipe.roles.items()}
    if cfg.serving.pd_ratio is not None:
        if set(recipe.roles) != {"prefill", "decode"}:
            raise ConfigError(
                f"kimi-k3:serving.pdRatio = {cfg.serving.pd_ratio!r}: only for disaggregated recipes "
                "(gb200-disagg, gb300-disagg)"
            )
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
            where = (
                f"kimi-k3:serving.pdRatio = {cfg.serving.pd_ratio!r}"
                if cfg.serving.pd_ratio is not None
                else f"kimi-k3:serving.roles.{key}.replicas = {n}"
            )
            raise ConfigError(
                f"{where}: every role of recipe {cfg.recipe} needs at least 1 replica ({key} has {n}); "
                "allowed: 1 or more (to stop paying for GPUs, set "
                "kimi-k3:cluster.gpuNodes.desiredNodes = 0 or run pulumi destroy, which keeps the weights)"
            )
    return replicas


def _dcp(key: str, role_type: str, tp: int, over, flags: dict[str, FlagValue], image: str) -> int:
    """The role's decode context parallel size, refused where vLLM refuses it (recipes/facts/dcp.yaml)."""
    dcp = over.dcp if over and over.dcp is not None else 1
    if dcp == 1:
        return 1
    facts = recipe_file("facts/dcp.yaml")
    where = f"kimi-k3:serving.roles.{key}.dcp = {dcp}"
    if role_type not in facts["roles"]:
        raise ConfigError(
            f"{where}: decode context parallelism only applies to roles that decode "
            f"({', '.join(facts['roles'])}); {key} is a {role_type} role"
        )
    if tp % dcp:
        raise ConfigError(f"{where}: must divide the role's tp {tp} (vLLM splits the TP group into DCP groups)")
    if flags.get("--speculative-config") not in (None, False):
        if not facts["speculative_with_dcp_by_image"].get(image, False):
            raise ConfigError(
                f"{where}: the vLLM in {image} does not run Kimi K3 speculative decoding with decode "
                "context parallelism (recipes/facts/dcp.yaml: ai-dynamo/dynamo#12843, vllm-project/vllm#53673); "
                "drop --speculative-config or set dcp: 1"
            )
        if str(flags.get(facts["interleave_flag"], "1")) != "1":
            raise ConfigError(
                f"{where}: vLLM refuses speculative decoding with {facts['interleave_flag']} > 1 "
                "(vllm/v1/worker/cp_utils.py); leave it at 1"
            )
    return dcp


def _check_image_arch(image: str, arches: set[str], key: str, where: str) -> tuple[str, ...]:
    """The kubernetes.io/arch values pods of this image may use; an error when the nodes they need are not one."""
    known = image_facts(image).arch
    if known is None:
        return tuple(sorted(arches))  # unknown image: nothing to narrow (the rule reports "not evaluated")
    usable = known & arches
    if not usable:
        raise ConfigError(
            f"{key} = {image!r}: built for {', '.join(sorted(known))} (recipes/facts/images.yaml) but "
            f"{where} are {', '.join(sorted(arches))}; allowed: an image built for "
            f"{' or '.join(sorted(arches))}"
        )
    return tuple(sorted(usable))


def _provided_domain(cfg: StackConfig, nodes: int) -> Optional[ProvidedDomain]:
    """The provider's ComputeDomain, if the stack names one: every role claims it (KV over NVLink: the transport
    sees the domain's nodes as its NVLink domain), so all must fit inside."""
    p = cfg.cluster.compute_domain.provided
    if p is None:
        return None
    if nodes > p.nodes:
        raise ConfigError(
            f"kimi-k3:cluster.computeDomain.provided.nodes = {p.nodes}: the graph's roles take {nodes} GPU nodes, "
            "and every one claims the provided ComputeDomain's channel; allowed: fewer replicas "
            f"(kimi-k3:serving.pdRatio / roles.<role>.replicas), or a domain of {nodes} nodes or more"
        )
    return ProvidedDomain(p.name, p.namespace, p.channel_template, p.nodes)


def build_graph(stack: str, cfg: StackConfig) -> ServingGraph:
    recipe = load_recipe(cfg.recipe)
    # One name whatever the recipe: a DynamoGraphDeployment whose name changes is replaced, not patched, and the
    # operator then starts a second worker generation beside the first (ai-dynamo/dynamo#13495).
    name = GRAPH_NAME
    platform = load_platforms()[recipe.platform]
    check_provided_compute_domain(cfg.cluster, cfg.serving.namespace, platform.nvlink_domain_nodes)
    unknown = sorted(set(cfg.serving.roles) - set(recipe.roles))
    if unknown:
        raise ConfigError(
            f"kimi-k3:serving.roles.{unknown[0]}: no such role in recipe {cfg.recipe}; "
            f"allowed: {', '.join(sorted(recipe.roles))}"
        )
    image, runtime_version = _resolve_image(recipe, cfg)
    # A staged rollout (docs/operating.md#rollouts) adds replicas to every worker role; the node group follows.
    replicas = {key: n + cfg.serving.rollout.surge for key, n in _replicas(recipe, cfg).items()}
    compile_cache = cfg.storage.resolved_compile_cache(cfg.cluster.mode) != "none"
    topology = {}
    for key, rr in recipe.roles.items():
        over = cfg.serving.roles.get(key)
        util = over.gpu_memory_utilization if over and over.gpu_memory_utilization else rr.gpu_memory_utilization
        topology[key] = role_topology(key, rr, over, platform, util, recipe.kv_cache_dtype, recipe.max_model_len)
    role_nodes = {key: nodes * replicas[key] for key, (_, nodes) in topology.items()}
    provided = _provided_domain(cfg, sum(role_nodes.values()))
    transport, transport_reason = choose_kv_transport(recipe, cfg, platform, image, role_nodes)
    if provided is not None and transport != "nvlink":  # one IMEX domain for all: KV stays on NVLink
        raise ConfigError(f"kimi-k3:cluster.computeDomain.provided: KV would leave NVLink ({transport_reason})")
    efa = efa_devices_per_node(cfg, platform.name) if transport == "efa" else 0
    if transport == "efa" and not efa:
        raise ConfigError(
            f"kimi-k3:cluster.efaDevicesPerNode: KV moves over EFA ({transport_reason}) but the GPU "
            "nodes offer no EFA devices; set it (existing clusters) or use eks mode"
        )
    shared_domain = provided is not None or (transport == "nvlink" and len(recipe.roles) > 1)
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
    download_arch = _check_image_arch(cfg.model.download_image, side_arches, "kimi-k3:model.downloadImage", side_where)
    model_path = f"{cfg.model.cache_mount_path.rstrip('/')}/{cfg.model.repo}"
    prestaged = cfg.storage.resolved_kind == "fsx-lustre" and bool(cfg.storage.fsx.s3_import_path)
    if cfg.model.revision != "main" and not prestaged:
        # Each pinned revision downloads into its own directory, beside the one the graph is serving from.
        model_path += f"@{cfg.model.revision}"
    # The drafter's flags join every decoding role's before the DCP check, which refuses DCP with speculation.
    spec_flags, drafter = resolve_speculation(
        cfg, image, node_local=cfg.storage.resolved_node_local_weights(cfg.cluster.mode)
    )
    base_env = {
        "MODEL_PATH": model_path,
        "SERVED_MODEL_NAME": cfg.model.served_model_name,
        "HF_HUB_OFFLINE": "1",  # weights come only from the verified cache, never the Hub
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_ENGINE_READY_TIMEOUT_S": str(cfg.serving.startup_probe_seconds),
    }
    roles = []
    sglang = recipe.engine == "sglang"
    ctx = dict(
        replicas=replicas,
        platform=platform,
        efa=efa,
        compile_cache=compile_cache,
        name=name,
        transport=transport,
        shared_domain=shared_domain,
    )
    for key, rr in recipe.roles.items():
        over = cfg.serving.roles.get(key)
        util = over.gpu_memory_utilization if over and over.gpu_memory_utilization else rr.gpu_memory_utilization
        tp, nodes = topology[key]
        extra = over.extra_args if over else {}
        if sglang:
            if rr.pp > 1:  # SGLang's pipeline flags are not modelled (recipes/facts/sglang.yaml)
                raise ConfigError(f"recipes/profiles/{cfg.recipe}.yaml: roles.{key}.pp = {rr.pp}: allowed: 1 (SGLang)")
            roles.append(_sglang_role(key, rr, over, recipe, cfg, tp, nodes, util, model_path, base_env, image, ctx))
            continue
        _check_overridable(extra, DERIVED_WORKER_FLAGS, f"kimi-k3:serving.roles.{key}.extraArgs")
        typed: dict[str, FlagValue] = {
            # Literal values, never $(VAR): the operator shell-quotes multinode args into `sh -c` for non-leader
            # pods (`$` -> `\$`) after kubelet has expanded $(VAR), so they would get `\/model-cache/...`.
            "--model": model_path,
            "--served-model-name": cfg.model.served_model_name,
            "--tensor-parallel-size": tp,
            **({"--pipeline-parallel-size": rr.pp} if rr.pp > 1 else {}),
            "--gpu-memory-utilization": util,
            "--kv-cache-dtype": kv_cache_dtype_flag(recipe.kv_cache_dtype),  # vLLM's spelling: bf16 -> bfloat16
            "--max-model-len": recipe.max_model_len,
            "--block-size": 0,  # set below from the role's final flags (role_fields)
        }
        events = (
            {
                "--kv-events-config": (
                    '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:%d","enable_kv_cache_events":true}'
                    % recipe.kv_events_port
                )
            }
            if rr.publishes_kv_events
            else {}
        )
        # Prefill workers draft too: upstream's disaggregated DSpark profile runs it on both roles (prefill builds
        # the drafter's prompt KV for decode: disagg-gb300-agentic at 1d08afd35788, see recipes/facts/speculation.yaml).
        flags = merge(merge(merge(merge(merge(typed, recipe.worker.args), rr.args), events), spec_flags), extra)
        dcp = _dcp(key, rr.type, tp, over, flags, image)
        if dcp > 1:
            flags = merge(flags, {"--decode-context-parallel-size": dcp})
        if efa:
            flags = _kv_over_efa(flags)
        fields = role_fields(flags)
        block = fields["block_size"]
        if recipe.block_size is not None and recipe.block_size != block:
            raise ConfigError(
                f"recipes/profiles/{cfg.recipe}.yaml: blockSize = {recipe.block_size}: vLLM runs role {key} "
                f"(TP{tp}, prefix caching {'on' if fields['prefix_caching'] else 'off'}) "
                f"with {block}-token blocks and hashes prefixes and publishes KV events in them; "
                f"allowed: {block}, or leave blockSize out (derived)"
            )
        flags["--block-size"] = block
        env = merge(merge(merge(base_env, recipe.worker.env), rr.env), over.env if over else {})
        cache_key = compile_cache_key(image, flag_list(flags)) if compile_cache else ""
        if compile_cache:
            env = merge(env, compile_cache_env())
        roles.append(
            Role(
                key=key,
                component=rr.component,
                type=rr.type,
                tp=tp,
                gpus_per_node=platform.gpus_per_node,
                nodes_per_replica=nodes,
                replicas=replicas[key],
                gpu_memory_utilization=util,
                kv_cache_dtype=recipe.kv_cache_dtype,
                max_model_len=recipe.max_model_len,
                shared_memory_size=(
                    over.shared_memory_size if over and over.shared_memory_size else rr.shared_memory_size
                ),
                publishes_kv_events=rr.publishes_kv_events,
                cpu=rr.cpu,
                memory=rr.memory,
                args=flag_list(flags),
                env=tuple(env.items()),
                pod_annotations=tuple(sorted(recipe.worker.pod_annotations.items())),
                efa_devices=efa,
                dcp=dcp,
                compile_cache_key=cache_key,
                nvlink_group=name if transport == "nvlink" else f"{name}-{key}",
                compute_domain=("nvlink" if shared_domain else key) if platform.nvlink_domain_nodes > 1 else "",
                pp=rr.pp,
                **fields,
            )
        )
    # Roles of one TP share one block (every shipped stack); with mixed TP the frontend flag names the first role's,
    # and Dynamo's router still routes each worker set by the block its model card registers (watcher.rs).
    block_size = roles[0].block_size
    fe = cfg.serving.frontend
    _check_overridable(fe.extra_args, DERIVED_FRONTEND_FLAGS, "kimi-k3:serving.frontend.extraArgs")
    migration = fe.migration_limit if fe.migration_limit is not None else default_migration_limit()
    fe_flags = merge(
        merge(recipe.frontend.args, {"--kv-cache-block-size": block_size, "--migration-limit": migration}),
        fe.extra_args,
    )
    http_port = int(fe_flags.get("--http-port", 8000))
    frontend = Frontend(
        component="Frontend",
        replicas=fe.replicas or recipe.frontend.replicas,
        cpu=recipe.frontend.cpu,
        memory=recipe.frontend.memory,
        args=flag_list(fe_flags),
        env=tuple(
            merge(merge({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, recipe.frontend.env), fe.env).items()
        ),
        http_port=http_port,
        arch=frontend_arch,
        zone=frontend_zone,
    )
    graph = ServingGraph(
        stack=stack,
        recipe=cfg.recipe,
        name=name,
        namespace=cfg.serving.namespace,
        platform=platform,
        image=image,
        runtime_version=runtime_version,
        engine=recipe.engine,
        block_size=block_size,
        model_repo=cfg.model.repo,
        model_revision=cfg.model.revision,
        served_model_name=cfg.model.served_model_name,
        cache_mount_path=cfg.model.cache_mount_path.rstrip("/"),
        model_path=model_path,
        frontend=frontend,
        roles=tuple(roles),
        startup_probe_seconds=cfg.serving.startup_probe_seconds,
        ready_timeout_seconds=cfg.serving.ready_timeout_seconds,
        download_timeout_seconds=cfg.serving.download_timeout_seconds,
        compile_cache=compile_cache,
        node_local_weights=cfg.storage.resolved_node_local_weights(cfg.cluster.mode),
        kv_transport=transport,
        kv_transport_reason=transport_reason,
        download_arch=download_arch,
        side_arch=tuple(sorted(side_arches)),
        provided_compute_domain=provided,
        drafter=drafter,
    )
    if (
        cfg.serving.autoscaling.enabled
    ):  # the SLA planner: bounds, config and profile data (kimi_k3/graph/autoscaling.py)
        from kimi_k3.graph.autoscaling import resolve

        graph = replace(graph, autoscaling=resolve(cfg, graph))
    return graph


def default_migration_limit() -> int:
    """How many times the frontend may move one in-flight request to another worker (recipes/defaults/request-migration.yaml)."""
    value = (recipe_file("defaults/request-migration.yaml") or {}).get("migrationLimit")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MIGRATION_LIMIT_MAX:
        raise ConfigError(
            f"recipes/defaults/request-migration.yaml: migrationLimit = {value!r}: allowed: an integer from 0 "
            f"to {MIGRATION_LIMIT_MAX} (Dynamo's --migration-limit; 0 turns migration off)"
        )
    return value


def cache_size_gi(cfg: StackConfig, checkpoint_bytes: int) -> int:
    """PVC size: configured, or the checkpoint plus headroom, rounded up to whole GiB."""
    if cfg.storage.size_gi is not None:
        return cfg.storage.size_gi
    return math.ceil(checkpoint_bytes * (1 + cfg.storage.headroom_percent / 100) / 2**30)
