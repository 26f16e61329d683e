"""Capacity, cold-start and cost planner for Kimi K3 under vLLM: pure functions over recipes/ data.

Memory follows vLLM's own accounting for hybrid (MLA + KDA) models:
- weights per GPU: TP-sharded tensors divided by TP, replicated tensors whole on every rank;
- MLA latent KV (kv_lora_rank + qk_rope_head_dim per token per MLA layer) is not split by TP, only by DCP;
- KDA conv + recurrent state per request is split by TP heads; speculative tokens add conv rows and state slots;
- the KV pool is HBM x gpu-memory-utilization minus weights and an activation reserve; vLLM pads every KDA
  state page to one attention page, groups layers, and counts blocks the way its startup log reports them;
- with prefix caching (vLLM's mamba_cache_mode "align") the block aligns to 128 tokens and each KDA group keeps
  2 + speculative state blocks per request instead of 1 + speculative; "GPU KV cache size" is
  max_concurrency x max_model_len (vLLM #50055's DCP figures are reproduced this way: tests/test_perf.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Iterable

from .data import recipe_file

GIB = 2**30
MIB = 2**20
GB = 10**9
CONTEXTS = (8192, 32768, 131072, 262144, 524288, 1048576)


@dataclass(frozen=True)
class ModelFacts:
    """The subset of moonshotai/Kimi-K3's config.json (and its quantization) the planner needs."""

    num_hidden_layers: int
    first_k_dense_replace: int
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    intermediate_size: int
    mla_layers: tuple[int, ...]
    kda_layers: tuple[int, ...]
    mla_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    mla_output_gate: bool
    kda_heads: int
    kda_head_dim: int
    kda_conv_kernel: int
    num_experts: int
    experts_per_token: int
    num_shared_experts: int
    moe_intermediate_size: int
    routed_expert_hidden_size: int
    attn_res: bool
    vision: dict[str, Any]
    routed_expert_bits: float
    other_bits: float
    kv_dtype_bytes: dict[str, int]
    kda_conv_state_bytes: int
    kda_recurrent_state_bytes: int
    mla_block_alignment: int
    mla_block_alignment_prefix_caching: int
    activation_reserve_gib: float
    load_format_reads: dict[str, str]    # vLLM --load-format -> group_share | whole (recipes/model.yaml)


@dataclass(frozen=True)
class Platform:
    name: str
    gpu_product_label: str
    gpus_per_node: int
    hbm_gb: float
    nvlink_domain_nodes: int
    arch: str


@dataclass(frozen=True)
class StorageBackend:
    name: str
    description: str
    shared: bool
    per_client_gbps: float
    aggregate_gbps: float | None


@dataclass(frozen=True)
class WeightGroup:
    """One family of tensors: parameter count, storage bits per parameter, and whether TP shards it."""

    name: str
    kind: str
    params: int
    bits: float
    tp_sharded: bool

    @property
    def bytes(self) -> float:
        return self.params * self.bits / 8


@dataclass(frozen=True)
class Pricing:
    instance_hour_usd: float
    gpus_per_instance: int
    source: str
    as_of: str
    billed_instances: int | None = None  # bought as one block (EC2 Capacity Block): paid for whether used or not


@dataclass(frozen=True)
class RoleSpec:
    name: str
    gpu: str
    tp: int
    nodes_per_replica: int
    replicas: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_model_len: int
    spec_tokens: int = 0
    dcp: int = 1
    load_format: str = "auto"     # vLLM --load-format: how much of the checkpoint each pod reads
    prefix_caching: bool = False  # vLLM --enable-prefix-caching: KDA state in mamba_cache_mode "align"


@dataclass(frozen=True)
class RolePlan:
    gpu: str
    tp: int
    dcp: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    spec_tokens: int
    max_model_len: int
    weights_bytes_per_gpu: float
    reserve_bytes: float
    kv_bytes_per_token: float
    state_bytes_per_request: float
    pool_bytes: float
    block_size: int
    page_bytes: int
    group_size: int
    attention_groups: int
    kda_groups: int
    num_blocks: int
    request_bytes_at_max_len: int
    load_seconds: dict[str, float] = field(default_factory=dict)
    prefix_caching: bool = False

    @property
    def fits(self) -> bool:
        return self.pool_bytes >= self.request_bytes_at_max_len

    @property
    def fit_margin_gib(self) -> float:
        return (self.pool_bytes - self.request_bytes_at_max_len) / GIB

    @property
    def kda_blocks_per_request(self) -> int:
        # vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes: (2 + spec) pages in "align" mode
        # (prefix caching), (1 + spec) in "none"; one such set per KDA group.
        return self.kda_groups * ((2 if self.prefix_caching else 1) + self.spec_tokens)

    def blocks_per_request(self, context: int) -> int:
        # vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config: the sum over groups of each
        # group's pages; FullAttentionSpec.max_memory_usage_bytes: a DCP rank holds cdiv(len, dcp) tokens.
        return (self.attention_groups * math.ceil(math.ceil(context / self.dcp) / self.block_size)
                + self.kda_blocks_per_request)

    def vllm_max_concurrency(self, context: int) -> float:
        """vLLM's 'Maximum concurrency for N tokens per request: X' figure."""
        return self.num_blocks / self.blocks_per_request(context)

    def max_concurrent_requests(self, context: int) -> int:
        return int(self.vllm_max_concurrency(context))

    @property
    def vllm_kv_cache_tokens(self) -> int:
        """vLLM's 'GPU KV cache size: N tokens' log line."""
        # vllm/v1/core/kv_cache_utils.py _report_kv_cache_config (K3-era): int(max_concurrency x max_model_len);
        # older vLLM logged num_blocks // groups x block x dcp (vllm#40691; test_planner.py's Kimi Linear log).
        return int(self.vllm_max_concurrency(self.max_model_len) * self.max_model_len)

    @property
    def single_request_tokens(self) -> int:
        """The longest context one request could hold if it had the whole pool."""
        spare = self.num_blocks - self.kda_blocks_per_request
        return max(0, spare // self.attention_groups) * self.block_size * self.dcp

    def contexts(self) -> list[int]:
        return sorted({c for c in CONTEXTS if c <= self.max_model_len} | {self.max_model_len})

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "tp": self.tp,
            "dcp": self.dcp,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "spec_tokens": self.spec_tokens,
            "prefix_caching": self.prefix_caching,
            "max_model_len": self.max_model_len,
            "weights_gb_per_gpu": round(self.weights_bytes_per_gpu / GB, 3),
            "activation_reserve_gib": round(self.reserve_bytes / GIB, 3),
            "kv_bytes_per_token": round(self.kv_bytes_per_token, 3),
            "kv_pool_gib_per_gpu": round(max(self.pool_bytes, 0) / GIB, 3),
            "kv_capacity_tokens": self.vllm_kv_cache_tokens,
            "kv_capacity_tokens_single_request": self.single_request_tokens,
            "state_mib_per_request_per_gpu": round(self.state_bytes_per_request / MIB, 3),
            "max_concurrent_requests": {str(c): self.max_concurrent_requests(c) for c in self.contexts()},
            "fits": self.fits,
            "fit_margin_gib": round(self.fit_margin_gib, 3),
            "load_seconds": {k: round(v, 1) for k, v in sorted(self.load_seconds.items())},
        }


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
            "roles": {r.spec.name: {**r.plan.to_json(), "replicas": r.spec.replicas, "gpus": r.gpus,
                                    "nodes": r.nodes} for r in self.roles},
            "gpus": self.gpus,
            "nodes": self.nodes,
            "gpu_hours_per_hour": self.gpu_hours_per_hour,
            "cost_per_hour_usd": None if cost is None else round(cost, 2),
            "used_cost_per_hour_usd": None if cost is None else round(self.used_cost_per_hour_usd, 2),
            "output_tokens_per_second": self.output_tokens_per_second,
            "usd_per_million_output_tokens": None if per_mtok is None else round(per_mtok, 4),
            "cost_basis": self.cost_basis,
            "used_usd_per_million_output_tokens": None if used_mtok is None else round(used_mtok, 4),
            "pricing": None if self.pricing is None else {
                "instance_hour_usd": self.pricing.instance_hour_usd,
                "gpus_per_instance": self.pricing.gpus_per_instance,
                "billed_instances": self.pricing.billed_instances,
                "source": self.pricing.source, "as_of": self.pricing.as_of},
        }


@lru_cache(maxsize=None)
def load_model_facts() -> ModelFacts:
    data = recipe_file("model.yaml")
    t, mla, kda, moe = data["text"], data["text"]["mla"], data["text"]["kda"], data["text"]["moe"]
    q, kv, rt = data["quantization"], data["kv_cache"], data["runtime"]
    return ModelFacts(
        num_hidden_layers=t["num_hidden_layers"], first_k_dense_replace=t["first_k_dense_replace"],
        hidden_size=t["hidden_size"], vocab_size=t["vocab_size"], tie_word_embeddings=t["tie_word_embeddings"],
        intermediate_size=t["intermediate_size"], mla_layers=tuple(t["mla_layers"]),
        kda_layers=tuple(t["kda_layers"]), mla_heads=mla["num_attention_heads"], q_lora_rank=mla["q_lora_rank"],
        kv_lora_rank=mla["kv_lora_rank"], qk_nope_head_dim=mla["qk_nope_head_dim"],
        qk_rope_head_dim=mla["qk_rope_head_dim"], v_head_dim=mla["v_head_dim"], mla_output_gate=mla["output_gate"],
        kda_heads=kda["num_heads"], kda_head_dim=kda["head_dim"], kda_conv_kernel=kda["short_conv_kernel_size"],
        num_experts=moe["num_experts"], experts_per_token=moe["num_experts_per_token"],
        num_shared_experts=moe["num_shared_experts"], moe_intermediate_size=moe["moe_intermediate_size"],
        routed_expert_hidden_size=moe["routed_expert_hidden_size"], attn_res=t["attn_res"],
        vision=dict(data["vision"]), routed_expert_bits=q["routed_expert_bits_per_param"],
        other_bits=q["other_bits_per_param"], kv_dtype_bytes=dict(kv["dtype_bytes"]),
        kda_conv_state_bytes=kv["kda_conv_state_bytes"], kda_recurrent_state_bytes=kv["kda_recurrent_state_bytes"],
        mla_block_alignment=kv["mla_block_alignment_tokens"],
        mla_block_alignment_prefix_caching=kv["mla_block_alignment_tokens_prefix_caching"],
        activation_reserve_gib=rt["activation_reserve_gib"],
        load_format_reads=dict(rt["load_format_reads"]),
    )


@lru_cache(maxsize=None)
def load_platforms() -> dict[str, Platform]:
    return {name: Platform(name=name, **p) for name, p in recipe_file("platforms.yaml").items()}


def load_storage_backends(fsx_size_gib: float | None = None,
                          fsx_mbps_per_tib: float | None = None) -> dict[str, StorageBackend]:
    """Backends from recipes/storage.yaml; FSx aggregate = size x per-unit throughput (overridable per stack)."""
    out = {}
    for name, b in recipe_file("storage.yaml").items():
        if name == "local_zone_link":
            continue
        aggregate = b.get("aggregate_gbps")
        if "size_gib" in b:
            size = fsx_size_gib if fsx_size_gib is not None else b["size_gib"]
            unit = fsx_mbps_per_tib if fsx_mbps_per_tib is not None else b["per_unit_mbps_per_tib"]
            aggregate = size / 1024 * unit / 1000
        out[name] = StorageBackend(name=name, description=b["description"], shared=b["shared"],
                                   per_client_gbps=b["per_client_gbps"], aggregate_gbps=aggregate)
    return out


def local_zone_link_gbps() -> float:
    """Assumed bandwidth between a Local Zone and its parent Region for all GPU nodes together (storage.yaml)."""
    return float(recipe_file("storage.yaml")["local_zone_link"]["aggregate_gbps"])


def weight_groups(m: ModelFacts) -> list[WeightGroup]:
    """Every tensor family of the checkpoint with vLLM's TP placement (sharded vs replicated on each rank)."""
    h, o = m.hidden_size, m.other_bits
    n_mla, n_kda = len(m.mla_layers), len(m.kda_layers)
    n_moe = m.num_hidden_layers - m.first_k_dense_replace
    n_dense = m.first_k_dense_replace
    kp = m.kda_heads * m.kda_head_dim
    lat, mi = m.routed_expert_hidden_size, m.moe_intermediate_size
    v = m.vision
    vh, vq = v["hidden_size"], v["qkv_hidden_size"]
    vision_layer = 3 * vh * vq + vq * vh + 2 * vh * v["intermediate_size"] + 2 * vh
    vision_embed = (3 * v["patch_size"] ** 2 * vh + v["pos_emb_height"] * v["pos_emb_width"] * vh
                    + v["pos_emb_time"] * vh)
    merged = vh * v["merge_kernel"][0] * v["merge_kernel"][1]
    projector = vh + merged * merged + merged * v["text_hidden_size"]
    norms_per_layer = 2 * h + (2 * h + 2 * h if m.attn_res else 0)  # input/post norms (+ res norms, res projections)
    g = WeightGroup
    return [
        g("routed experts w1/w2/w3", "routed_experts", n_moe * m.num_experts * 3 * mi * lat, m.routed_expert_bits, True),
        g("shared experts", "shared_experts", n_moe * 3 * m.num_shared_experts * mi * h, o, True),
        # vLLM builds the latent projections and the router as ReplicatedLinear on every rank.
        g("latent down/up proj + norm", "latent_proj", n_moe * (2 * lat * h + lat), o, False),
        g("router gate + bias", "router", n_moe * (m.num_experts * h + m.num_experts), o, False),
        g("dense MLP (layer 0)", "dense_mlp", n_dense * 3 * m.intermediate_size * h, o, True),
        # KDA: q/k/v/g, o, b, f_b, dt_bias and the q/k/v short convs are split by heads.
        g("KDA projections + convs", "kda", n_kda * (4 * kp * h + h * kp + m.kda_heads * h + kp * m.kda_head_dim
                                                     + kp + 3 * kp * m.kda_conv_kernel), o, True),
        g("KDA f_a proj, A_log, o_norm", "kda_replicated", n_kda * (m.kda_head_dim * h + 2 * m.kda_head_dim), o, False),
        # MLA: q_b, kv_b, output gate and o_proj split by heads; q_a and kv_a (the latent) replicated.
        g("MLA q_b/kv_b/g/o proj", "mla", n_mla * (m.mla_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) * m.q_lora_rank
                                                  + m.mla_heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank
                                                  + (m.mla_heads * m.v_head_dim * h if m.mla_output_gate else 0)
                                                  + h * m.mla_heads * m.v_head_dim), o, True),
        g("MLA q_a/kv_a proj + norms", "mla_replicated",
          n_mla * ((m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) * h + m.q_lora_rank + m.kv_lora_rank), o, False),
        g("layer norms + attention-residual proj", "norms", m.num_hidden_layers * norms_per_layer + h, o, False),
        g("embedding", "embedding", m.vocab_size * h, o, True),
        g("lm_head", "lm_head", 0 if m.tie_word_embeddings else m.vocab_size * h, o, True),
        # --mm-encoder-tp-mode data (every K3 recipe) keeps a whole vision encoder on each rank.
        g("vision tower + projector", "vision", v["num_hidden_layers"] * vision_layer + vision_embed + projector, o, False),
    ]


def total_params(m: ModelFacts) -> int:
    return sum(g.params for g in weight_groups(m))


def active_params(m: ModelFacts) -> int:
    """Parameters one text token touches: all but the unselected routed experts and the vision tower."""
    out = 0
    for g in weight_groups(m):
        if g.kind == "routed_experts":
            out += g.params * m.experts_per_token // m.num_experts
        elif g.kind != "vision":
            out += g.params
    return out


def checkpoint_bytes(m: ModelFacts) -> int:
    return round(sum(g.bytes for g in weight_groups(m)))


def weights_bytes_per_gpu(m: ModelFacts, tp: int) -> float:
    return sum(g.bytes / tp if g.tp_sharded else g.bytes for g in weight_groups(m))


def kv_bytes_per_token(m: ModelFacts, kv_cache_dtype: str, dcp: int = 1) -> float:
    """MLA latent bytes per token per GPU: every TP rank holds the full latent; DCP splits tokens across ranks."""
    return len(m.mla_layers) * (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes[kv_cache_dtype] / dcp


def kda_state_page_bytes(m: ModelFacts, tp: int, spec_tokens: int = 0) -> int:
    """One KDA layer's state on one GPU (vLLM kda_state_shape): q/k/v conv rows + per-head recurrent matrix."""
    conv = 3 * m.kda_heads * m.kda_head_dim // tp * (m.kda_conv_kernel - 1 + spec_tokens) * m.kda_conv_state_bytes
    recurrent = m.kda_heads // tp * m.kda_head_dim * m.kda_head_dim * m.kda_recurrent_state_bytes
    return conv + recurrent


def state_bytes_per_request(m: ModelFacts, tp: int, spec_tokens: int = 0, prefix_caching: bool = False) -> int:
    # vLLM keeps 1 + num_speculative_tokens state slots per KDA layer for each running request, one more in "align".
    return len(m.kda_layers) * ((2 if prefix_caching else 1) + spec_tokens) * kda_state_page_bytes(m, tp, spec_tokens)


def _group_layout(n_attention: int, n_kda: int) -> tuple[int, int, int]:
    """vLLM's uniform-page grouping: (layers per group, attention groups, KDA groups)."""
    smallest, largest = min(n_attention, n_kda), max(n_attention, n_kda)
    size = largest if largest < smallest * 1.25 else smallest
    return size, math.ceil(n_attention / size), math.ceil(n_kda / size)


def _validate(m: ModelFacts, platforms: dict[str, Platform], gpu: str, tp: int, dcp: int,
              gpu_memory_utilization: float, kv_cache_dtype: str, spec_tokens: int) -> None:
    if gpu not in platforms:
        raise ValueError(f"unknown gpu {gpu!r}; known: {', '.join(sorted(platforms))}")
    if tp < 1 or m.kda_heads % tp or m.mla_heads % tp:
        raise ValueError(f"tp {tp} must divide the {m.kda_heads} KDA and {m.mla_heads} MLA heads")
    if dcp < 1 or tp % dcp:
        raise ValueError(f"dcp {dcp} must divide tp {tp}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError("gpu_memory_utilization must be in (0, 1]")
    if kv_cache_dtype not in m.kv_dtype_bytes:
        raise ValueError(f"kv_cache_dtype must be one of {', '.join(sorted(m.kv_dtype_bytes))}")
    if spec_tokens < 0:
        raise ValueError("spec_tokens must be >= 0")


def aligned_block_size(tp: int, *, kv_cache_dtype: str = "fp8", spec_tokens: int = 0, prefix_caching: bool = False,
                       facts: ModelFacts | None = None) -> int:
    """The attention block (tokens) vLLM runs Kimi K3 with: its prefix-hash and KV-event unit, which a smaller
    --block-size does not change (vLLM raises it to this) and which the KV router must use too."""
    m = facts or load_model_facts()
    # vllm/platforms/interface.py _align_hybrid_block_size: the smallest multiple of the kernel alignment whose
    # MLA page holds one KDA state page (which is then padded to it); the DCP rank's page is the same size.
    attn_page_per_token = (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes[kv_cache_dtype]
    align = m.mla_block_alignment_prefix_caching if prefix_caching else m.mla_block_alignment
    return align * math.ceil(kda_state_page_bytes(m, tp, spec_tokens) / (align * attn_page_per_token))


def plan_role(gpu: str, tp: int, *, dcp: int = 1, gpu_memory_utilization: float = 0.9,
              kv_cache_dtype: str = "fp8", spec_tokens: int = 0, max_model_len: int = 1048576,
              kv_budget_gib: float | None = None, activation_reserve_gib: float | None = None,
              prefix_caching: bool = False,
              facts: ModelFacts | None = None, platforms: dict[str, Platform] | None = None) -> RolePlan:
    """Memory plan of one vLLM worker (one TP group). `fits`: weights + reserve + one max_model_len request fit."""
    m = facts or load_model_facts()
    plats = platforms or load_platforms()
    _validate(m, plats, gpu, tp, dcp, gpu_memory_utilization, kv_cache_dtype, spec_tokens)
    reserve = (m.activation_reserve_gib if activation_reserve_gib is None else activation_reserve_gib) * GIB
    weights = weights_bytes_per_gpu(m, tp)
    if kv_budget_gib is None:
        pool = plats[gpu].hbm_gb * GB * gpu_memory_utilization - weights - reserve
    else:
        pool = kv_budget_gib * GIB
    attn_page_per_token = (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes[kv_cache_dtype]
    block = aligned_block_size(tp, kv_cache_dtype=kv_cache_dtype, spec_tokens=spec_tokens,
                               prefix_caching=prefix_caching, facts=m)
    page = block * attn_page_per_token
    size, attn_groups, kda_groups = _group_layout(len(m.mla_layers), len(m.kda_layers))
    # vllm/v1/core/kv_cache_utils.py get_num_blocks: available // page // layers per group.
    num_blocks = max(0, int(pool // (size * page)))
    plan = RolePlan(
        gpu=gpu, tp=tp, dcp=dcp, gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype,
        spec_tokens=spec_tokens, max_model_len=max_model_len, weights_bytes_per_gpu=weights,
        reserve_bytes=reserve, kv_bytes_per_token=kv_bytes_per_token(m, kv_cache_dtype, dcp),
        state_bytes_per_request=state_bytes_per_request(m, tp, spec_tokens, prefix_caching), pool_bytes=pool,
        block_size=block, page_bytes=page, group_size=size, attention_groups=attn_groups,
        kda_groups=kda_groups, num_blocks=num_blocks, request_bytes_at_max_len=0, prefix_caching=prefix_caching,
    )
    # vllm/v1/core/kv_cache_utils.py _max_memory_usage_bytes_from_groups: layers per group x page x pages.
    return replace(plan, request_bytes_at_max_len=plan.blocks_per_request(max_model_len) * size * page)


def load_seconds(bytes_per_pod: int, pods: int, backend: StorageBackend, link_gbps: float | None = None) -> float:
    """Seconds for `pods` pods that start together to each read `bytes_per_pod` from `backend`; `link_gbps` caps
    all of them together (the Local Zone link when the storage sits in the parent Region)."""
    if pods < 1:
        raise ValueError("pods must be >= 1")
    rate = backend.per_client_gbps
    if backend.shared and backend.aggregate_gbps is not None:
        rate = min(rate, backend.aggregate_gbps / pods)
    if link_gbps is not None:
        rate = min(rate, link_gbps / pods)
    return bytes_per_pod / (rate * GB)


def bytes_per_pod(m: ModelFacts, tp: int, gpus_per_pod: int, load_format: str = "auto") -> int:
    """What one worker pod reads from storage at a cold start, by vLLM's loader (recipes/model.yaml load_format_reads):
    the whole checkpoint, or with fastsafetensors its GPUs' share of the files (each byte once per replica)."""
    reads = m.load_format_reads.get(load_format)
    if reads is None:
        raise ValueError(f"unknown --load-format {load_format!r}; known: {', '.join(sorted(m.load_format_reads))}")
    if reads == "whole":
        return checkpoint_bytes(m)
    return round(checkpoint_bytes(m) * gpus_per_pod / tp)


def bytes_per_replica(m: ModelFacts, tp: int, gpus_per_pod: int, load_format: str = "auto") -> int:
    """What one TP group (replica) reads from storage in all: its pods' reads together."""
    return bytes_per_pod(m, tp, gpus_per_pod, load_format) * (tp // gpus_per_pod)


def plan_stack(roles: Iterable[RoleSpec], pricing: Pricing | None,
               storage: dict[str, StorageBackend] | None = None, *,
               output_tokens_per_second: float | None = None) -> StackPlan:
    """Plan every role of a stack; cold start assumes all worker pods start together on shared storage."""
    m = load_model_facts()
    plats = load_platforms()
    backends = storage if storage is not None else load_storage_backends()
    specs = list(roles)
    shaped = []
    for s in specs:
        p = plats[s.gpu]
        if s.tp != s.nodes_per_replica * p.gpus_per_node:
            raise ValueError(f"role {s.name}: tp {s.tp} != {s.nodes_per_replica} nodes x {p.gpus_per_node} GPUs")
        shaped.append((s, p))
    total_pods = sum(s.nodes_per_replica * s.replicas for s in specs)
    out = []
    for s, p in shaped:
        plan = plan_role(s.gpu, s.tp, dcp=s.dcp, gpu_memory_utilization=s.gpu_memory_utilization,
                         kv_cache_dtype=s.kv_cache_dtype, spec_tokens=s.spec_tokens,
                         max_model_len=s.max_model_len, prefix_caching=s.prefix_caching, facts=m, platforms=plats)
        read = bytes_per_pod(m, s.tp, p.gpus_per_node, s.load_format)
        times = {name: load_seconds(read, total_pods if b.shared else 1, b) for name, b in backends.items()}
        plan = replace(plan, load_seconds=times)
        nodes = s.nodes_per_replica * s.replicas
        out.append(StackRolePlan(spec=s, plan=plan, gpus=nodes * p.gpus_per_node, nodes=nodes, pods=nodes))
    return StackPlan(roles=tuple(out), pricing=pricing, output_tokens_per_second=output_tokens_per_second)


def memory_fit(gpu: str, tp: int, **kwargs: Any) -> tuple[bool, str]:
    """For the policy pack's memory-fit rule: (fits, one-line reason with the numbers)."""
    plan = plan_role(gpu, tp, **kwargs)
    verb = "fits" if plan.fits else "does not fit"
    return plan.fits, (
        f"Kimi K3 TP{tp} on {gpu} {verb} a {plan.max_model_len:,}-token request: weights "
        f"{plan.weights_bytes_per_gpu / GB:.1f} GB/GPU, KV pool {plan.pool_bytes / GIB:.1f} GiB/GPU, one request "
        f"needs {plan.request_bytes_at_max_len / GIB:.1f} GiB (margin {plan.fit_margin_gib:+.1f} GiB)")
