"""plan.py -> role_plans.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from kimi_k3.graph.model import ServingGraph
from kimi_k3.sizing.memory import RolePlan, plan_role


def role_kv_plans(graph: ServingGraph) -> dict[str, RolePlan]:
    """Each role's memory plan, as `kimi-k3 plan STACK` computes it (planner.plan_role with the role's facts)."""
    return {
        r.key: plan_role(
            graph.platform.name,
            r.tp,
            dcp=r.dcp,
            gpu_memory_utilization=r.gpu_memory_utilization,
            kv_cache_dtype=r.kv_cache_dtype,
            max_model_len=r.max_model_len,
            prefix_caching=r.prefix_caching,
        )
        for r in graph.roles
    }
