"""A role's topology, checked: TP in whole nodes, multinode (>= 2 nodes), within one NVLink domain, dividing the
attention heads and fitting weights plus one max-length request (the planner's memory model). Every refusal lists
the TPs that pass all of these checks."""

from __future__ import annotations

from kimi_k3.config.base import ConfigError
from kimi_k3.facts.model import load_model_facts
from kimi_k3.facts.platforms import Platform
from kimi_k3.graph.recipe import RoleRecipe
from kimi_k3.sizing.memory import memory_fit


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
        if (
            _divides_heads(tp)
            and memory_fit(
                platform.name, tp, gpu_memory_utilization=util, kv_cache_dtype=kv_dtype, max_model_len=max_len
            )[0]
        ):
            out.append(tp)
    return out


def role_topology(
    key: str, recipe_role: RoleRecipe, over, platform: Platform, util: float, kv_dtype: str, max_len: int
) -> tuple[int, int]:
    """(tp, nodes per replica), checked: whole nodes, multinode (>= 2 nodes), each TP group within one NVLink
    domain, dividing the heads, fitting in memory. Every message lists the TPs that pass all of these checks.
    A recipe role's `pp` pipeline stages multiply the nodes: each stage is one TP group (vLLM's layout)."""
    where = f"kimi-k3:serving.roles.{key}"
    gpn = platform.gpus_per_node
    pp = recipe_role.pp
    tp = over.tp if over and over.tp is not None else None
    nodes = over.nodes_per_replica if over and over.nodes_per_replica is not None else None
    if tp is None and nodes is not None:
        tp = nodes * gpn // pp
    tp = tp if tp is not None else recipe_role.tp
    layout = f"TP{tp}" + (f" x PP{pp}" if pp > 1 else "")

    def allowed() -> str:
        if pp > 1:
            return f"allowed with PP{pp} on {platform.name}: TP a multiple of {gpn}, at most {gpn * platform.nvlink_domain_nodes}"
        return f"allowed on {platform.name}: {', '.join(map(str, allowed_tps(platform, util, kv_dtype, max_len)))}"

    if tp % gpn:
        raise ConfigError(
            f"{where}.tp = {tp}: must be a multiple of {gpn} (GPUs per {platform.name} node), "
            f"so every pod takes a whole node; {allowed()}"
        )
    derived_nodes = tp * pp // gpn
    if nodes is not None and nodes != derived_nodes:
        raise ConfigError(
            f"{where}.nodesPerReplica = {nodes}: {layout} on {platform.name} spans {derived_nodes} nodes "
            f"of {gpn} GPUs; set tp = nodesPerReplica x {gpn}" + (f" / {pp}" if pp > 1 else "")
        )
    if derived_nodes < 2:
        raise ConfigError(
            f"{where}.tp = {tp}: gives multinode nodeCount {derived_nodes}; Dynamo multinode needs "
            f"nodeCount >= 2 (TP >= {2 * gpn} on {platform.name}); {allowed()}"
        )
    if tp // gpn > platform.nvlink_domain_nodes:
        raise ConfigError(
            f"{where}.tp = {tp}: spans {tp // gpn} nodes, more than one NVLink domain holds "
            f"({platform.nvlink_domain_nodes} {platform.name} nodes); {allowed()}"
        )
    if not _divides_heads(tp):
        m = load_model_facts()
        raise ConfigError(
            f"{where}.tp = {tp}: must divide Kimi K3's {m.mla_heads} attention heads "
            f"({m.kda_heads} KDA, {m.mla_heads} MLA); {allowed()}"
        )
    fits, why = memory_fit(
        platform.name, tp, gpu_memory_utilization=util, kv_cache_dtype=kv_dtype, max_model_len=max_len, pp=pp
    )  # the planner's memory model is also the policy pack's fit rule
    if not fits:
        raise ConfigError(f"{where}.tp = {tp}: {why}; use a larger TP ({allowed()})")
    return tp, derived_nodes
