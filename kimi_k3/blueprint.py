"""plan.py, stack_files.py -> blueprint.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from kimi_k3.aws import nodes as aws
from kimi_k3.config.base import ConfigError
from kimi_k3.config.stack import StackConfig, parse_stack_config
from kimi_k3.config.stack_files import StackError, in_stack_file, read_stack_config
from kimi_k3.errors import UserError
from kimi_k3.facts import platforms as facts_platforms
from kimi_k3.graph.build import build_graph
from kimi_k3.graph.model import ServingGraph
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import memory


def _rebudget(stack: planner.StackPlan, budget_gib: float) -> planner.StackPlan:
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
        plan = memory.plan_role(
            s.gpu,
            s.tp,
            dcp=s.dcp,
            gpu_memory_utilization=s.gpu_memory_utilization,
            kv_cache_dtype=s.kv_cache_dtype,
            spec_tokens=s.spec_tokens,
            max_model_len=s.max_model_len,
            kv_budget_gib=budget_gib,
            prefix_caching=s.prefix_caching,
        )
        roles.append(replace(r, plan=replace(plan, load_seconds=r.plan.load_seconds)))
    return replace(stack, roles=tuple(roles))


def _from_graph(args: argparse.Namespace) -> tuple[planner.StackPlan, str]:
    from kimi_k3.blueprint import load_stack
    from kimi_k3.graph.model import role_flag, role_prefix_caching

    cfg, graph = load_stack(args.stack)
    roles = [
        memory.RoleSpec(
            name=r.key,
            gpu=graph.platform.name,
            tp=r.tp,
            nodes_per_replica=r.nodes_per_replica,
            replicas=r.replicas,
            gpu_memory_utilization=r.gpu_memory_utilization,
            kv_cache_dtype=r.kv_cache_dtype,
            max_model_len=r.max_model_len,
            dcp=r.dcp,
            load_format=role_flag(r, "--load-format", "auto"),
            prefix_caching=role_prefix_caching(r),
        )
        for r in graph.roles
    ]
    billed = None
    if cfg.cluster.mode == "eks":  # a Capacity Block is paid whole: the reservation's instances, used or not
        nodes = aws.gpu_node_plan(cfg, graph.platform.name, graph.nodes)
        billed = nodes.max_nodes if nodes.capacity_type == "CAPACITY_BLOCK" else None
    pricing = (
        None
        if cfg.pricing is None
        else planner.Pricing(
            instance_hour_usd=cfg.pricing.instance_hour_usd,
            gpus_per_instance=graph.platform.gpus_per_node,
            source=cfg.pricing.source,
            as_of=cfg.pricing.as_of,
            billed_instances=billed,
        )
    )
    fsx = cfg.storage.fsx  # the stack's filesystem size and tier set its aggregate throughput
    stack = planner.plan_stack(
        roles,
        pricing,
        facts_platforms.load_storage_backends(fsx.storage_capacity_gib, fsx.per_unit_storage_throughput),
        output_tokens_per_second=args.output_tokens_per_second,
    )
    if args.kv_budget_gib is not None:
        stack = _rebudget(stack, args.kv_budget_gib)
    return stack, f"stack {args.stack}"


def stack_plan(name: str) -> planner.StackPlan:
    """A stack's plan as `kimi-k3 plan NAME` computes it (its own pricing, storage and roles)."""
    args = argparse.Namespace(stack=name, output_tokens_per_second=None, kv_budget_gib=None)
    return _from_graph(args)[0]


def load_stack(stack: str, root: Path | None = None) -> tuple[StackConfig, ServingGraph]:
    """The validated config and serving graph of a stack, without Pulumi (for plan and check)."""
    stack_file = read_stack_config(stack, root)
    try:
        cfg = parse_stack_config(stack_file.config, stack_file.secrets)
        return cfg, build_graph(stack, cfg)
    except ConfigError as err:
        raise StackError(in_stack_file(stack, err)) from None
