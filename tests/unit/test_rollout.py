"""What `kimi-k3 plan` says about a rollout: gaps, surge capacity against the Capacity Block, duration."""

from __future__ import annotations

from conftest import ROOT

from kimi_k3.blueprint import load_stack
from kimi_k3.graph import rollout
from kimi_k3.graph.build import build_graph


def test_single_replica_roles_have_a_gap_and_a_surge_is_sized_in_nodes():
    cfg, graph = load_stack("gb300-disagg", ROOT)
    p = rollout.plan(graph, 0, 18, 1500)
    assert {r.role: r.gap for r in p.roles} == {"prefill": True, "decode": False}
    assert (p.graph_nodes, p.surge_nodes, p.surge_fits) == (6, 4, True)
    assert p.rollout_seconds == 1500 * 3
    assert "surge 1: needs 4 more nodes (6 -> 10); fits the 18-node reservation" in p.lines()


def test_a_surge_that_does_not_fit_says_so_and_unknown_pools_say_unknown():
    cfg, graph = load_stack("gb200-disagg", ROOT)
    p = rollout.plan(graph, 0, 9, 1500)
    assert p.surge_fits is False and "does NOT fit the 9-node reservation" in p.lines()[-1]
    assert rollout.plan(graph, 0, None, 1500).surge_fits is None


def test_surge_config_adds_a_replica_to_every_worker_role():
    cfg, graph = load_stack("gb300-disagg", ROOT)
    surged = build_graph(
        "gb300-disagg",
        cfg.model_copy(
            update={
                "serving": cfg.serving.model_copy(
                    update={"rollout": cfg.serving.rollout.model_copy(update={"surge": 1})}
                )
            }
        ),
    )
    assert {r.key: r.replicas for r in surged.roles} == {r.key: r.replicas + 1 for r in graph.roles}
    assert surged.nodes == graph.nodes + 4
    p = rollout.plan(surged, 1, 18, 1500)
    assert not any(r.gap for r in p.roles)


def test_autoscaling_bounds_respect_the_capacity_block():
    cfg, graph = load_stack("gb300-disagg", ROOT)
    b = rollout.scaling_bounds(graph, 18, 4, 1500)
    # 18 nodes, every role at one 2-node replica (4 nodes): either role may grow to 1 + 14 // 2 = 8
    assert b.min_replicas == {"prefill": 1, "decode": 1} and b.max_replicas == {"prefill": 8, "decode": 8}
    assert b.max_gpus == 72
    cfg, graph = load_stack("gb200-disagg", ROOT)
    assert rollout.scaling_bounds(graph, 18, 4, 1500).max_replicas == {"prefill": 3, "decode": 3}
