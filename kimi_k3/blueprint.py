"""The whole stack resolved once, as data: config -> serving graph -> cloud node plan -> memory/cost plan ->
durations -> add-ons, validated together. `__main__.py` (from the engine's config) and the offline commands (from
the stack file) read the same frozen `Blueprint`; nothing downstream re-reads the stack or re-derives a plan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from kimi_k3.aws import cluster as aws_cluster
from kimi_k3.aws import nodes as aws
from kimi_k3.aws import storage as aws_storage
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig, parse_stack_config
from kimi_k3.config.stack_files import StackError, in_stack_file, read_stack_config
from kimi_k3.errors import UserError
from kimi_k3.facts import platforms as facts_platforms
from kimi_k3.gcp import plan as gke
from kimi_k3.graph import durations
from kimi_k3.graph.build import build_graph, cache_size_gi
from kimi_k3.graph.model import ServingGraph
from kimi_k3.graph.role_plans import role_specs
from kimi_k3.k8s import deployment as manifests
from kimi_k3.k8s import platform_set
from kimi_k3.k8s.addons import AddonSpec, addon_specs
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import memory


@dataclass(frozen=True)
class Blueprint:
    """One stack, resolved and validated once. Frozen: a command that wants another view derives a new value
    (`dataclasses.replace`), it never edits this one."""

    stack: str
    config: StackConfig
    graph: ServingGraph
    cache_gi: int  # the model cache's size (PVC / filesystem), GiB
    gpu_nodes: Optional[aws.GpuNodePlan]  # eks mode: the GPU node group, checked against the reservation
    subnets: tuple[aws_cluster.SubnetPlan, ...]  # eks mode: the VPC's subnets (() otherwise)
    endpoint: Optional[dict[str, Any]]  # eks mode: the API endpoint's access
    addons: tuple[AddonSpec, ...]
    plan: planner.StackPlan  # memory per role, cold start, cost (what `kimi-k3 plan STACK` prints)
    durations: durations.Estimates  # the critical path's step estimates
    gke_nodes: Optional[gke.GkeNodePlan] = None  # gke mode: the GPU node pool, checked against the reservation

    @property
    def eks(self) -> bool:
        return self.config.cluster.mode == "eks"

    @property
    def reservation_nodes(self) -> Optional[int]:
        """The GPU nodes the reservation holds (eks mode), else None: the ceiling a rollout or autoscaler has."""
        return self.gpu_nodes.max_nodes if self.gpu_nodes is not None else None

    @property
    def autoscaling(self):
        """The SLA planner's resolved deployment (kimi_k3.graph.autoscaling.Autoscaling), or None."""
        return self.graph.autoscaling

    @classmethod
    def resolve(cls, stack: str, cfg: StackConfig, graph: Optional[ServingGraph] = None) -> "Blueprint":
        """Everything the program and the commands derive from a validated config, once (raises UserError)."""
        graph = graph if graph is not None else build_graph(stack, cfg)
        cache_gi = cache_size_gi(cfg, durations.staged_bytes(graph))  # the checkpoint and a speculative drafter
        gpu_nodes, subnets, endpoint = None, (), None
        if cfg.cluster.mode == "eks":
            gpu_nodes = aws.gpu_node_plan(cfg, graph.platform.name, graph.nodes, efa=graph.kv_transport == "efa")
            subnets = tuple(aws_cluster.subnet_plan(cfg))
            endpoint = aws_cluster.endpoint_access(cfg.cluster)
            aws_storage.check_storage(cfg, cache_gi)
        gke_nodes = None
        if cfg.cluster.mode == "gke":  # the cloud hands the graph its node facts (docs/architecture.md)
            gke_nodes = gke.gpu_node_plan(cfg, graph.platform.name, graph.nodes)
            weights_on_gcs = cfg.storage.resolved_kind == "gcs"
            graph = replace(graph, node_facts=gke.node_facts(gke_nodes, weights_on_gcs, bool(graph.compile_cache)))
        addons = tuple(
            addon_specs(cfg, gpu_nodes.instance.name if gpu_nodes else None, kv_over_efa=graph.kv_transport == "efa")
        )
        # Operator, Grove, KAI, DRA driver and CRD versions move together (recipes/platform/platform-set.yaml).
        image_key = "kimi-k3:serving.image" if cfg.serving.image else f"recipes/profiles/{graph.recipe}.yaml image"
        platform_set.check(
            addons,
            cfg.cluster.kubernetes_version if gpu_nodes else None,
            {
                "DynamoGraphDeployment": manifests.graph_deployment(graph)["apiVersion"],
                **{
                    "ComputeDomain": manifests.compute_domain(graph, k)["apiVersion"] for k in graph.compute_domains[:1]
                },
            },
            {image_key: graph.image},  # it runs only on the operator lines `runtimeImages` lists
            cfg.platform_set,
        )
        return cls(
            stack=stack,
            config=cfg,
            graph=graph,
            cache_gi=cache_gi,
            gpu_nodes=gpu_nodes,
            subnets=subnets,
            endpoint=endpoint,
            addons=addons,
            plan=stack_plan_of(cfg, graph, gpu_nodes, gke_nodes),
            durations=durations.estimates(cfg, graph),
            gke_nodes=gke_nodes,
        )

    @classmethod
    def from_engine(cls, stack: str, raw: dict[str, str], secret_keys: set[str]) -> "Blueprint":
        """`__main__.py`: the engine's config (Pulumi's `kimi-k3:*` keys as strings) resolved (raises UserError)."""
        return cls.resolve(stack, parse_stack_config(raw, secret_keys))

    @classmethod
    def for_stack(cls, name: str, root: Path | None = None) -> "Blueprint":
        """The offline commands: Pulumi.NAME.yaml resolved without Pulumi (errors name the stack file)."""
        cfg, graph = load_stack(name) if root is None else load_stack(name, root)
        try:
            return cls.resolve(name, cfg, graph)
        except StackError:
            raise
        except UserError as err:  # the node plan, storage and add-on checks, as `pulumi up` would refuse them
            raise StackError(in_stack_file(name, err)) from None


def stack_plan_of(
    cfg: StackConfig,
    graph: ServingGraph,
    gpu_nodes: Optional[aws.GpuNodePlan],
    gke_nodes: Optional[gke.GkeNodePlan] = None,
) -> planner.StackPlan:
    """A stack's memory, cold-start and cost plan from its typed config, graph and GPU node plan (eks mode)."""
    roles = role_specs(graph)
    # A Capacity Block is paid whole: the reservation's instances, used or not.
    billed = gpu_nodes.max_nodes if gpu_nodes is not None and gpu_nodes.capacity_block else None
    if gke_nodes is not None:  # a GKE reservation (sub-block) is paid whole as well
        billed = gke_nodes.reservation_nodes
    pricing = (
        None
        if cfg.pricing is None
        else planner.Pricing(
            instance_hour_usd=cfg.pricing.instance_hour_usd,
            gpus_per_instance=graph.platform.gpus_per_node,
            source=cfg.pricing.source,
            as_of=cfg.pricing.as_of,
            billed_instances=billed,
            **({"billed_as": "GKE reservation"} if gke_nodes is not None else {}),
        )
    )
    fsx = cfg.storage.fsx  # the stack's filesystem size and tier set its aggregate throughput
    return planner.plan_stack(
        roles, pricing, facts_platforms.load_storage_backends(fsx.storage_capacity_gib, fsx.per_unit_storage_throughput)
    )


def rebudget(stack: planner.StackPlan, budget_gib: float) -> planner.StackPlan:
    """The plan with a given KV pool per GPU (`plan --kv-budget-gib`), refused above what a role has left."""
    roles = []
    for r in stack.roles:
        s = r.spec
        room = r.plan.to_json()["kv_pool_gib_per_gpu"]  # what the GPU has left after weights and the reserve
        if budget_gib > room:
            raise UserError(
                f"--kv-budget-gib {budget_gib:g}: more than the {room:.2f} GiB per GPU that role "
                f"{s.name} ({s.gpu} TP{s.tp}, util {s.gpu_memory_utilization}) has left after weights "
                f"and the activation reserve; allowed: a number > 0 and <= {room:.2f}"
            )
        plan = memory.plan_spec(s, kv_budget_gib=budget_gib)
        roles.append(replace(r, plan=replace(plan, load_seconds=r.plan.load_seconds)))
    return replace(stack, roles=tuple(roles))


def stack_plan(name: str) -> planner.StackPlan:
    """A stack's plan as `kimi-k3 plan NAME` computes it (its own pricing, storage and roles)."""
    return Blueprint.for_stack(name).plan


def load_stack(stack: str, root: Path | None = None) -> tuple[StackConfig, ServingGraph]:
    """The validated config and serving graph of a stack, without Pulumi (what Blueprint.for_stack starts from)."""
    stack_file = read_stack_config(stack, root)
    try:
        cfg = parse_stack_config(stack_file.config, stack_file.secrets)
        return cfg, build_graph(stack, cfg)
    except ConfigError as err:
        raise StackError(in_stack_file(stack, err)) from None
