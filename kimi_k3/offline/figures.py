"""The figures a change is judged by (GPUs, nodes, cost per hour, estimated time to first token) for one rendered
stack, computed by the code of the revision that rendered it. `kimi-k3 render` writes them to DIR/figures.json;
`kimi-k3 diff` compares them (a base rendered before figures.json existed shows `-`)."""

from __future__ import annotations

from typing import Any

from kimi_k3.blueprint import Blueprint


def stack_figures(blueprint: Blueprint, resources: list[dict[str, Any]]) -> dict[str, Any]:
    from kimi_k3.offline import critical_path

    graph, plan = blueprint.graph, blueprint.plan
    path = critical_path.critical_path(resources, blueprint.durations)
    cost, used = plan.cost_per_hour_usd, plan.used_cost_per_hour_usd
    return {
        "gpus": graph.gpus,
        "nodes": graph.nodes,
        # What the stack is billed per hour (a Capacity Block whole) and what its own nodes cost of that.
        "costPerHourUsd": None if cost is None else round(cost, 2),
        "usedCostPerHourUsd": None if used is None else round(used, 2),
        "ttftSeconds": round(path.total_seconds),
    }
