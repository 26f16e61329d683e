"""build.py, cost.py -> memory.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from kimi_k3 import flags as argv_flags
from kimi_k3.facts.model import CONTEXTS, GB, GIB, MIB, ModelFacts, checkpoint_bytes, load_model_facts, weight_groups
from kimi_k3.facts.platforms import Platform, StorageBackend, load_platforms
from kimi_k3.facts.vllm_flags import planner_kv_dtype
from kimi_k3.sizing import pipeline
from kimi_k3.sizing.aic_table import raw_table


def _prefix_caching(tokens) -> bool:
    flags = [a for a in tokens if a in ("--enable-prefix-caching", "--no-enable-prefix-caching")]
    return not flags or flags[-1] == "--enable-prefix-caching"


def vllm_block_size(tokens) -> int:
    """The block vLLM runs a Kimi K3 worker with, from its argv: a smaller --block-size is raised to it
    (_align_hybrid_block_size), and prefix hashes, KV events and Dynamo's model card all use it."""
    tp = int(argv_flags.flag_value(tokens, "--tensor-parallel-size") or 1)
    dtype = argv_flags.flag_value(tokens, "--kv-cache-dtype") or "auto"
    spec = json.loads(argv_flags.flag_value(tokens, "--speculative-config") or "{}")
    return aligned_block_size(
        tp,
        kv_cache_dtype=planner_kv_dtype(dtype),
        spec_tokens=int(spec.get("num_speculative_tokens", 0) or 0),
        prefix_caching=_prefix_caching(tokens),
    )


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
    load_format: str = "auto"  # vLLM --load-format: how much of the checkpoint each pod reads
    prefix_caching: bool = False  # vLLM --enable-prefix-caching: KDA state in mamba_cache_mode "align"
    drafter_bytes: float = 0.0  # a speculative drafter's weights, loaded beside the target's (plan_role)
    pp: int = 1  # pipeline stages (--pipeline-parallel-size): a replica is tp x pp GPUs


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
    pp: int = 1  # pipeline stages; with pp > 1 the figures are the tightest stage's (kimi_k3/sizing/pipeline.py)

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
        return (
            self.attention_groups * math.ceil(math.ceil(context / self.dcp) / self.block_size)
            + self.kda_blocks_per_request
        )

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
            **({"pp": self.pp} if self.pp > 1 else {}),
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


def _validate(
    m: ModelFacts,
    platforms: dict[str, Platform],
    gpu: str,
    tp: int,
    dcp: int,
    gpu_memory_utilization: float,
    kv_cache_dtype: str,
    spec_tokens: int,
) -> None:
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


def aligned_block_size(
    tp: int,
    *,
    kv_cache_dtype: str = "fp8",
    spec_tokens: int = 0,
    prefix_caching: bool = False,
    facts: ModelFacts | None = None,
) -> int:
    """The attention block (tokens) vLLM runs Kimi K3 with: its prefix-hash and KV-event unit, which a smaller
    --block-size does not change (vLLM raises it to this) and which the KV router must use too."""
    m = facts or load_model_facts()
    # vllm/platforms/interface.py _align_hybrid_block_size: the smallest multiple of the kernel alignment whose
    # MLA page holds one KDA state page (which is then padded to it); the DCP rank's page is the same size.
    attn_page_per_token = (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes[kv_cache_dtype]
    align = m.mla_block_alignment_prefix_caching if prefix_caching else m.mla_block_alignment
    return align * math.ceil(kda_state_page_bytes(m, tp, spec_tokens) / (align * attn_page_per_token))


def plan_spec(
    s: RoleSpec,
    kv_budget_gib: float | None = None,
    facts: ModelFacts | None = None,
    platforms: dict[str, Platform] | None = None,
) -> RolePlan:
    """plan_role with a role's own facts: the one mapping from a RoleSpec to its memory plan (plan, rehearse)."""
    return plan_role(
        s.gpu,
        s.tp,
        dcp=s.dcp,
        gpu_memory_utilization=s.gpu_memory_utilization,
        kv_cache_dtype=s.kv_cache_dtype,
        spec_tokens=s.spec_tokens,
        max_model_len=s.max_model_len,
        kv_budget_gib=kv_budget_gib,
        prefix_caching=s.prefix_caching,
        drafter_bytes=s.drafter_bytes,
        facts=facts,
        platforms=platforms,
        pp=s.pp,
    )


def plan_role(
    gpu: str,
    tp: int,
    *,
    dcp: int = 1,
    gpu_memory_utilization: float = 0.9,
    kv_cache_dtype: str = "fp8",
    spec_tokens: int = 0,
    max_model_len: int = 1048576,
    kv_budget_gib: float | None = None,
    activation_reserve_gib: float | None = None,
    prefix_caching: bool = False,
    drafter_bytes: float = 0.0,
    facts: ModelFacts | None = None,
    platforms: dict[str, Platform] | None = None,
    pp: int = 1,
    _stage_weights: float | None = None,
) -> RolePlan:
    """Memory plan of one vLLM worker (one TP group; with `pp` > 1 its tightest pipeline stage, since vLLM gives
    every worker the smallest KV block count any of them has). `fits`: weights + reserve + one max_model_len request fit.
    `drafter_bytes`: a speculative drafter's weights (all ranks), loaded beside the target's and sharded like them by
    the target's TP (vLLM's draft model takes the target's parallel config); they come out of the KV pool. The
    drafter's own KV layers are not counted (not modelled: a DSpark draft has 5 MLA layers vs the target's 24)."""
    m = facts or load_model_facts()
    plats = platforms or load_platforms()
    _validate(m, plats, gpu, tp, dcp, gpu_memory_utilization, kv_cache_dtype, spec_tokens)
    if pp > 1:
        kw = dict(dcp=dcp, gpu_memory_utilization=gpu_memory_utilization, kv_cache_dtype=kv_cache_dtype)
        kw |= dict(spec_tokens=spec_tokens, max_model_len=max_model_len, kv_budget_gib=kv_budget_gib)
        kw |= dict(activation_reserve_gib=activation_reserve_gib, prefix_caching=prefix_caching, platforms=plats)
        stages = [
            plan_role(
                gpu,
                tp,
                facts=pipeline.stage_facts(m, pp, i),
                drafter_bytes=drafter_bytes,
                _stage_weights=pipeline.stage_weights_bytes_per_gpu(m, tp, pp, i),
                **kw,
            )
            for i in range(pp)
        ]
        return replace(min(stages, key=lambda p: p.vllm_max_concurrency(max_model_len)), pp=pp)
    reserve = (m.activation_reserve_gib if activation_reserve_gib is None else activation_reserve_gib) * GIB
    weights = (weights_bytes_per_gpu(m, tp) if _stage_weights is None else _stage_weights) + drafter_bytes / tp
    if kv_budget_gib is None:
        pool = plats[gpu].hbm_gb * GB * gpu_memory_utilization - weights - reserve
    else:
        pool = kv_budget_gib * GIB
    attn_page_per_token = (m.kv_lora_rank + m.qk_rope_head_dim) * m.kv_dtype_bytes[kv_cache_dtype]
    block = aligned_block_size(
        tp, kv_cache_dtype=kv_cache_dtype, spec_tokens=spec_tokens, prefix_caching=prefix_caching, facts=m
    )
    page = block * attn_page_per_token
    size, attn_groups, kda_groups = _group_layout(len(m.mla_layers), len(m.kda_layers))
    # vllm/v1/core/kv_cache_utils.py get_num_blocks: available // page // layers per group.
    num_blocks = max(0, int(pool // (size * page)))
    plan = RolePlan(
        gpu=gpu,
        tp=tp,
        dcp=dcp,
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        spec_tokens=spec_tokens,
        max_model_len=max_model_len,
        weights_bytes_per_gpu=weights,
        reserve_bytes=reserve,
        kv_bytes_per_token=kv_bytes_per_token(m, kv_cache_dtype, dcp),
        state_bytes_per_request=state_bytes_per_request(m, tp, spec_tokens, prefix_caching),
        pool_bytes=pool,
        block_size=block,
        page_bytes=page,
        group_size=size,
        attention_groups=attn_groups,
        kda_groups=kda_groups,
        num_blocks=num_blocks,
        request_bytes_at_max_len=0,
        prefix_caching=prefix_caching,
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
    """What one worker pod reads from storage at a cold start, by vLLM's loader (recipes/facts/model.yaml load_format_reads):
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


def memory_fit(gpu: str, tp: int, **kwargs: Any) -> tuple[bool, str]:
    """For the policy pack's memory-fit rule: (fits, one-line reason with the numbers)."""
    plan = plan_role(gpu, tp, **kwargs)
    verb = "fits" if plan.fits else "does not fit"
    layout = f"TP{tp}" + (f" x PP{plan.pp} (tightest stage)" if plan.pp > 1 else "")
    return plan.fits, (
        f"Kimi K3 {layout} on {gpu} {verb} a {plan.max_model_len:,}-token request: weights "
        f"{plan.weights_bytes_per_gpu / GB:.1f} GB/GPU, KV pool {plan.pool_bytes / GIB:.1f} GiB/GPU, one request "
        f"needs {plan.request_bytes_at_max_len / GIB:.1f} GiB (margin {plan.fit_margin_gib:+.1f} GiB)"
    )


def memory_comparison(gpu: str, tp: int) -> Optional[dict[str, Any]]:
    """Our per-GPU weights and HBM next to aiconfigurator's (GiB), with the difference taken apart.

    Two terms explain it: aiconfigurator counts the MXFP4 routed experts at 4 bits per value, without the E8M0
    scale (8 bits per 32 values, +6.25% of the experts), and leaves the vision tower (kept whole on every GPU
    by --mm-encoder-tp-mode data) out of the weights. What remains is `residual_gib`."""
    theirs = raw_table().get("memory_gib_per_gpu", {}).get(f"{gpu} tp{tp}")
    if theirs is None:
        return None
    gib = 2**30
    m = load_model_facts()
    ours = weights_bytes_per_gpu(m, tp)
    groups = weight_groups(m)
    scale_bits = m.routed_expert_bits - 4
    scales = sum(g.params * scale_bits / 8 / tp for g in groups if g.kind == "routed_experts")
    vision = sum(g.bytes for g in groups if g.kind == "vision")
    hbm = load_platforms()[gpu].hbm_gb * 1e9
    return {
        "ours_weights_gib": round(ours / gib, 2),
        "aiconfigurator_weights_gib": round(theirs["weights"], 2),
        "difference_gib": round(ours / gib - theirs["weights"], 2),
        "mxfp4_scales_gib": round(scales / gib, 2),
        "vision_tower_gib": round(vision / gib, 2),
        "residual_gib": round((ours - scales - vision) / gib - theirs["weights"], 2),
        "ours_hbm_gib": round(hbm / gib, 2),
        "aiconfigurator_hbm_gib": round(theirs["hbm_bytes"] / gib, 2),
        "aiconfigurator_activations_nccl_other_gib": round(
            theirs["activations"] + theirs["nccl"] + theirs["others"], 2
        ),
    }
