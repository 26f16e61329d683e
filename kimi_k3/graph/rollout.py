"""What a rollout of the serving graph needs (pure): per role, whether one replica keeps serving while Grove
recreates another, the extra nodes a surge takes, whether they fit the Capacity Block, and how long it takes.

Grove (read at v0.1.0-alpha.12-rc1; the released dynamo-platform 1.5.0 bundles alpha.13) recreates one replica at a
time (RollingRecreate) and has no surge; the DynamoGraphDeployment exposes no rollout strategy for multinode workers
(docs/operating.md#rollouts). `kimi-k3:serving.rollout.surge` is ours: extra replicas while a rollout is staged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kimi_k3.graph.model import ServingGraph


@dataclass(frozen=True)
class RoleRollout:
    role: str
    replicas: int  # as configured, surge included
    nodes_per_replica: int
    gap: bool  # no serving replica while the only one is recreated
    surge_nodes: int  # nodes one more replica of this role takes


@dataclass(frozen=True)
class RolloutPlan:
    surge: int
    roles: tuple[RoleRollout, ...]
    graph_nodes: int  # nodes the graph uses now (surge included)
    surge_nodes: int  # nodes a surge of 1 more replica per role would add on top
    reservation_nodes: Optional[int]  # the Capacity Block / node pool ceiling, None when unknown
    replica_seconds: float  # one replica recreated: weights load + warm-up
    rollout_seconds: float  # every replica, one at a time

    @property
    def surge_fits(self) -> Optional[bool]:
        if self.reservation_nodes is None:
            return None
        return self.graph_nodes + (0 if self.surge else self.surge_nodes) <= self.reservation_nodes

    def lines(self) -> list[str]:
        out = []
        for r in self.roles:
            state = "gap: no serving replica while it is recreated" if r.gap else "one replica keeps serving"
            out.append(f"rollout {r.role}: {r.replicas} replica(s) of {r.nodes_per_replica} node(s); {state}")
        mins = self.rollout_seconds / 60
        out.append(
            f"rollout time: up to ~{mins:.0f} min (Grove recreates one replica at a time, ~{self.replica_seconds / 60:.0f} min each: weights load + warm-up)"
        )
        if self.surge:
            out.append(
                f"surge {self.surge}: active; the graph uses {self.graph_nodes} nodes"
                + (f" of {self.reservation_nodes}" if self.reservation_nodes else "")
            )
        elif self.reservation_nodes is None:
            out.append(f"surge 1: needs {self.surge_nodes} more nodes; node pool size unknown")
        else:
            verdict = "fits" if self.surge_fits else "does NOT fit"
            out.append(
                f"surge 1: needs {self.surge_nodes} more nodes ({self.graph_nodes} -> "
                f"{self.graph_nodes + self.surge_nodes}); {verdict} the {self.reservation_nodes}-node reservation"
            )
        return out


def plan(graph: ServingGraph, surge: int, reservation_nodes: Optional[int], replica_seconds: float) -> RolloutPlan:
    roles = tuple(
        RoleRollout(r.key, r.replicas, r.nodes_per_replica, gap=r.replicas < 2, surge_nodes=r.nodes_per_replica)
        for r in graph.roles
    )
    return RolloutPlan(
        surge=surge,
        roles=roles,
        graph_nodes=graph.nodes,
        surge_nodes=sum(r.surge_nodes for r in roles),
        reservation_nodes=reservation_nodes,
        replica_seconds=replica_seconds,
        rollout_seconds=replica_seconds * sum(r.replicas for r in roles),
    )


@dataclass(frozen=True)
class ScalingBounds:
    """Replica bounds an autoscaler (Dynamo's planner through a DynamoGraphDeploymentScalingAdapter, or KEDA)
    must respect: at least one TP group per role, and never more nodes than the Capacity Block / UltraServer."""

    min_replicas: dict[str, int]
    max_replicas: dict[str, int]  # each role alone growing, the others at their minimum
    max_gpus: Optional[int]  # the planner's --max-gpu-budget: the reservation's GPUs
    scale_up_seconds: float  # a new replica serves only after loading the weights

    def lines(self) -> list[str]:
        out = [f"autoscaling {k}: {self.min_replicas[k]}..{self.max_replicas[k]} replicas" for k in self.min_replicas]
        if self.max_gpus is not None:
            out.append(
                f"autoscaling GPU budget: {self.max_gpus} (the reservation); a scale-up serves after "
                f"~{self.scale_up_seconds / 60:.0f} min, so none may start later than that before the block ends"
            )
        return out


def scaling_bounds(
    graph: ServingGraph,
    reservation_nodes: Optional[int],
    gpus_per_node: int,
    replica_seconds: float,
    minimum: Optional[dict[str, int]] = None,
) -> ScalingBounds:
    """`minimum`: per role (default 1 each); each role's maximum leaves the others at theirs."""
    minimum = dict(minimum or {r.key: 1 for r in graph.roles})
    if reservation_nodes is None:
        maximum = {r.key: r.replicas for r in graph.roles}
    else:
        floor = sum(minimum[r.key] * r.nodes_per_replica for r in graph.roles)  # every role at its minimum
        maximum = {r.key: minimum[r.key] + (reservation_nodes - floor) // r.nodes_per_replica for r in graph.roles}
    budget = None if reservation_nodes is None else reservation_nodes * gpus_per_node
    return ScalingBounds(minimum, maximum, budget, replica_seconds)
