"""Capacity, cold-start and cost planner for Kimi K3 under vLLM: pure functions over recipes/ data.

Memory follows vLLM's own accounting for hybrid (MLA + KDA) models:
- weights per GPU: TP-sharded tensors divided by TP, replicated tensors whole on every rank;
- MLA latent KV (kv_lora_rank + qk_rope_head_dim per token per MLA layer) is not split by TP, only by DCP;
- KDA conv + recurrent state per request is split by TP heads; speculative tokens add conv rows and state slots;
- the KV pool is HBM x gpu-memory-utilization minus weights and an activation reserve; vLLM pads every KDA
  state page to one attention page, groups layers, and counts blocks the way its startup log reports them;
- with prefix caching (vLLM's mamba_cache_mode "align") the block aligns to 128 tokens and each KDA group keeps
  2 + speculative state blocks per request instead of 1 + speculative; "GPU KV cache size" is
  max_concurrency x max_model_len (vLLM #50055's DCP figures are reproduced this way: tests/perf/test_perf.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from kimi_k3.facts.model import load_model_facts
from kimi_k3.facts.platforms import StorageBackend, load_platforms, load_storage_backends
from kimi_k3.sizing.memory import RolePlan, RoleSpec, bytes_per_pod, load_seconds, plan_spec


@dataclass(frozen=True)
class Pricing:
    instance_hour_usd: float
    gpus_per_instance: int
    source: str
    as_of: str
    billed_instances: int | None = None  # bought as one block (EC2 Capacity Block): paid for whether used or not
    billed_as: str = "Capacity Block"  # what that block is called: an EC2 Capacity Block, a GKE reservation


@dataclass(frozen=True)
class StackRolePlan:
    spec: RoleSpec
    plan: RolePlan
    gpus: int
    nodes: int
    pods: int


@dataclass(frozen=True)
class StackPlan:
    roles: tuple[StackRolePlan, ...]
    pricing: Pricing | None
    output_tokens_per_second: float | None

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    @property
    def nodes(self) -> int:
        return sum(r.nodes for r in self.roles)

    @property
    def gpu_hours_per_hour(self) -> int:
        return self.gpus

    @property
    def used_cost_per_hour_usd(self) -> float | None:
        """What the GPUs the stack uses cost (its share of a larger block)."""
        if self.pricing is None:
            return None
        return self.gpus * self.pricing.instance_hour_usd / self.pricing.gpus_per_instance

    @property
    def cost_per_hour_usd(self) -> float | None:
        """What the stack costs to run: a Capacity Block is billed whole, used or not."""
        used = self.used_cost_per_hour_usd
        if used is None or self.pricing.billed_instances is None:
            return used
        return max(used, self.pricing.billed_instances * self.pricing.instance_hour_usd)

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        if self.cost_per_hour_usd is None or not self.output_tokens_per_second:
            return None
        return self.cost_per_hour_usd / (self.output_tokens_per_second * 3600) * 1e6

    @property
    def used_usd_per_million_output_tokens(self) -> float | None:
        """$/Mtok counting only the GPUs used (what `plan --sla` ranks by), not the whole block."""
        if self.used_cost_per_hour_usd is None or not self.output_tokens_per_second:
            return None
        return self.used_cost_per_hour_usd / (self.output_tokens_per_second * 3600) * 1e6

    @property
    def cost_basis(self) -> str | None:
        if self.pricing is None:
            return None
        return "capacity_block_billed_whole" if self.pricing.billed_instances else "gpus_used"

    def to_json(self) -> dict[str, Any]:
        cost = self.cost_per_hour_usd
        per_mtok = self.usd_per_million_output_tokens
        used_mtok = self.used_usd_per_million_output_tokens
        return {
            "roles": {
                r.spec.name: {**r.plan.to_json(), "replicas": r.spec.replicas, "gpus": r.gpus, "nodes": r.nodes}
                for r in self.roles
            },
            "gpus": self.gpus,
            "nodes": self.nodes,
            "gpu_hours_per_hour": self.gpu_hours_per_hour,
            "cost_per_hour_usd": None if cost is None else round(cost, 2),
            "used_cost_per_hour_usd": None if cost is None else round(self.used_cost_per_hour_usd, 2),
            "output_tokens_per_second": self.output_tokens_per_second,
            "usd_per_million_output_tokens": None if per_mtok is None else round(per_mtok, 4),
            "cost_basis": self.cost_basis,
            "used_usd_per_million_output_tokens": None if used_mtok is None else round(used_mtok, 4),
            "pricing": None
            if self.pricing is None
            else {
                "instance_hour_usd": self.pricing.instance_hour_usd,
                "gpus_per_instance": self.pricing.gpus_per_instance,
                "billed_instances": self.pricing.billed_instances,
                "source": self.pricing.source,
                "as_of": self.pricing.as_of,
            },
        }


def plan_stack(
    roles: Iterable[RoleSpec],
    pricing: Pricing | None,
    storage: dict[str, StorageBackend] | None = None,
    *,
    output_tokens_per_second: float | None = None,
) -> StackPlan:
    """Plan every role of a stack; cold start assumes all worker pods start together on shared storage."""
    m = load_model_facts()
    plats = load_platforms()
    backends = storage if storage is not None else load_storage_backends()
    specs = list(roles)
    shaped = []
    for s in specs:
        p = plats[s.gpu]
        if s.tp * s.pp != s.nodes_per_replica * p.gpus_per_node:
            raise ValueError(
                f"role {s.name}: tp {s.tp} x pp {s.pp} != {s.nodes_per_replica} nodes x {p.gpus_per_node} GPUs"
            )
        shaped.append((s, p))
    total_pods = sum(s.nodes_per_replica * s.replicas for s in specs)
    out = []
    for s, p in shaped:
        plan = plan_spec(s, facts=m, platforms=plats)
        read = bytes_per_pod(m, s.tp * s.pp, p.gpus_per_node, s.load_format)
        times = {name: load_seconds(read, total_pods if b.shared else 1, b) for name, b in backends.items()}
        plan = replace(plan, load_seconds=times)
        nodes = s.nodes_per_replica * s.replicas
        out.append(StackRolePlan(spec=s, plan=plan, gpus=nodes * p.gpus_per_node, nodes=nodes, pods=nodes))
    return StackPlan(roles=tuple(out), pricing=pricing, output_tokens_per_second=output_tokens_per_second)
