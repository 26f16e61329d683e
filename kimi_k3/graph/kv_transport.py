"""build.py -> kv_transport.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import json

from kimi_k3.config.base import ConfigError, FlagValue
from kimi_k3.config.stack import StackConfig
from kimi_k3.facts.images import image_facts
from kimi_k3.facts.platforms import Platform
from kimi_k3.graph.recipe import Recipe


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


def nvlink_domain_nodes(cfg: StackConfig, platform: Platform) -> tuple[int, str]:
    """Nodes one NVLink domain holds where the graph runs, and why: on EKS one UltraServer; with a provided
    ComputeDomain, the nodes it spans (every role claims it)."""
    provided = cfg.cluster.compute_domain.provided
    if provided is not None:
        n = provided.nodes
        return n, f"the provided ComputeDomain {provided.namespace}/{provided.name} ({n} nodes)"
    if cfg.cluster.mode == "eks":
        n = cfg.cluster.gpu_nodes.ultra_server_nodes
        return n, f"one UltraServer of kimi-k3:cluster.gpuNodes.ultraServerNodes = {n} instances"
    return platform.nvlink_domain_nodes, f"one {platform.name} NVL72 rack of {platform.nvlink_domain_nodes} nodes"


def choose_kv_transport(
    recipe: Recipe, cfg: StackConfig, platform: Platform, image: str, role_nodes: dict[str, int]
) -> tuple[str, str]:
    """(`nvlink` | `efa`, why): NVLink when prefill and decode fit one NVLink domain, EFA (with an EFA image) only
    when they cannot. Aggregated graphs move no KV between roles: NVLink (their TP groups need it anyway)."""
    disagg = {"prefill", "decode"} <= {r.type for r in recipe.roles.values()}
    total = sum(role_nodes.values())
    domain, where = nvlink_domain_nodes(cfg, platform)
    fits = total <= domain
    if not disagg:
        return "nvlink", "aggregated: no KV moves between roles"
    if cfg.cluster.mode == "eks" and not fits:
        # eks mode runs a graph inside one UltraServer; kimi_k3.aws.nodes.gpu_node_plan refuses this config with the
        # node-group reason (and the UltraServer size that would fit) right after this, before anything exists.
        return "nvlink", f"prefill + decode = {total} nodes exceed {where} (refused by the GPU node plan)"
    wanted = recipe.kv_transport
    if wanted == "nvlink" and not fits:
        raise ConfigError(
            f"kimi-k3:serving: prefill and decode take {total} GPU nodes, more than {where}; "
            "KV cannot stay on NVLink (recipe kvTransport: nvlink). Lower the replicas "
            "(kimi-k3:serving.pdRatio / roles.<role>.replicas) or use a recipe with kvTransport: auto"
        )
    if wanted == "nvlink" or (wanted == "auto" and fits):
        return "nvlink", f"prefill + decode = {total} nodes fit {where}: KV over NVLink (one ComputeDomain)"
    if not image_facts(image).efa:
        raise ConfigError(
            f"kimi-k3:serving.image = {image!r}: KV must cross EFA (prefill + decode = {total} nodes, "
            f"more than {where}), which needs a Dynamo EFA runtime image (vllm-runtime:<version>-efa, "
            "recipes/facts/images.yaml); none is published for the Kimi K3 build. Allowed: an -efa image, or "
            "fewer replicas so prefill and decode fit one NVLink domain"
        )
    return "efa", f"prefill + decode = {total} nodes exceed {where}: KV over EFA (NIXL LIBFABRIC)"
