"""plan.py -> role_plans.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import json

from kimi_k3.graph.model import ServingGraph
from kimi_k3.sizing.memory import RolePlan, RoleSpec, plan_spec


def role_specs(graph: ServingGraph) -> list[RoleSpec]:
    """Each role of the graph as the sizing layer sees it (its platform, TP, replicas and vLLM memory options)."""
    return [
        RoleSpec(
            name=r.key,
            gpu=graph.platform.name,
            tp=r.tp,
            pp=r.pp,
            nodes_per_replica=r.nodes_per_replica,
            replicas=r.replicas,
            gpu_memory_utilization=r.gpu_memory_utilization,
            kv_cache_dtype=r.kv_cache_dtype,
            max_model_len=r.max_model_len,
            dcp=r.dcp,
            load_format=r.load_format,
            prefix_caching=r.prefix_caching,
            spec_tokens=int(json.loads(r.speculative_config or "{}").get("num_speculative_tokens", 0) or 0),
            # Every role that runs --speculative-config loads the drafter (kimi-k3:serving.speculation).
            drafter_bytes=graph.drafter.bytes if graph.drafter and r.speculative_config else 0.0,
        )
        for r in graph.roles
    ]


def role_kv_plans(graph: ServingGraph, kv_budget_gib: float | None = None) -> dict[str, RolePlan]:
    """Each role's memory plan, as `kimi-k3 plan STACK [--kv-budget-gib G]` computes it (memory.plan_spec with the
    role's facts; a budget replaces the KV pool per GPU)."""
    return {s.name: plan_spec(s, kv_budget_gib) for s in role_specs(graph)}
