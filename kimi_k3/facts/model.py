"""cost.py -> model.py: moved by tools/relayout (issue 26)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kimi_k3.data import recipe_file

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
    load_format_reads: dict[str, str]  # vLLM --load-format -> group_share | whole (recipes/facts/model.yaml)


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


@lru_cache(maxsize=None)
def load_model_facts() -> ModelFacts:
    data = recipe_file("facts/model.yaml")
    t, mla, kda, moe = data["text"], data["text"]["mla"], data["text"]["kda"], data["text"]["moe"]
    q, kv, rt = data["quantization"], data["kv_cache"], data["runtime"]
    return ModelFacts(
        num_hidden_layers=t["num_hidden_layers"],
        first_k_dense_replace=t["first_k_dense_replace"],
        hidden_size=t["hidden_size"],
        vocab_size=t["vocab_size"],
        tie_word_embeddings=t["tie_word_embeddings"],
        intermediate_size=t["intermediate_size"],
        mla_layers=tuple(t["mla_layers"]),
        kda_layers=tuple(t["kda_layers"]),
        mla_heads=mla["num_attention_heads"],
        q_lora_rank=mla["q_lora_rank"],
        kv_lora_rank=mla["kv_lora_rank"],
        qk_nope_head_dim=mla["qk_nope_head_dim"],
        qk_rope_head_dim=mla["qk_rope_head_dim"],
        v_head_dim=mla["v_head_dim"],
        mla_output_gate=mla["output_gate"],
        kda_heads=kda["num_heads"],
        kda_head_dim=kda["head_dim"],
        kda_conv_kernel=kda["short_conv_kernel_size"],
        num_experts=moe["num_experts"],
        experts_per_token=moe["num_experts_per_token"],
        num_shared_experts=moe["num_shared_experts"],
        moe_intermediate_size=moe["moe_intermediate_size"],
        routed_expert_hidden_size=moe["routed_expert_hidden_size"],
        attn_res=t["attn_res"],
        vision=dict(data["vision"]),
        routed_expert_bits=q["routed_expert_bits_per_param"],
        other_bits=q["other_bits_per_param"],
        kv_dtype_bytes=dict(kv["dtype_bytes"]),
        kda_conv_state_bytes=kv["kda_conv_state_bytes"],
        kda_recurrent_state_bytes=kv["kda_recurrent_state_bytes"],
        mla_block_alignment=kv["mla_block_alignment_tokens"],
        mla_block_alignment_prefix_caching=kv["mla_block_alignment_tokens_prefix_caching"],
        activation_reserve_gib=rt["activation_reserve_gib"],
        load_format_reads=dict(rt["load_format_reads"]),
    )


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
    vision_embed = (
        3 * v["patch_size"] ** 2 * vh + v["pos_emb_height"] * v["pos_emb_width"] * vh + v["pos_emb_time"] * vh
    )
    merged = vh * v["merge_kernel"][0] * v["merge_kernel"][1]
    projector = vh + merged * merged + merged * v["text_hidden_size"]
    norms_per_layer = 2 * h + (2 * h + 2 * h if m.attn_res else 0)  # input/post norms (+ res norms, res projections)
    g = WeightGroup
    return [
        g(
            "routed experts w1/w2/w3",
            "routed_experts",
            n_moe * m.num_experts * 3 * mi * lat,
            m.routed_expert_bits,
            True,
        ),
        g("shared experts", "shared_experts", n_moe * 3 * m.num_shared_experts * mi * h, o, True),
        # vLLM builds the latent projections and the router as ReplicatedLinear on every rank.
        g("latent down/up proj + norm", "latent_proj", n_moe * (2 * lat * h + lat), o, False),
        g("router gate + bias", "router", n_moe * (m.num_experts * h + m.num_experts), o, False),
        g("dense MLP (layer 0)", "dense_mlp", n_dense * 3 * m.intermediate_size * h, o, True),
        # KDA: q/k/v/g, o, b, f_b, dt_bias and the q/k/v short convs are split by heads.
        g(
            "KDA projections + convs",
            "kda",
            n_kda * (4 * kp * h + h * kp + m.kda_heads * h + kp * m.kda_head_dim + kp + 3 * kp * m.kda_conv_kernel),
            o,
            True,
        ),
        g("KDA f_a proj, A_log, o_norm", "kda_replicated", n_kda * (m.kda_head_dim * h + 2 * m.kda_head_dim), o, False),
        # MLA: q_b, kv_b, output gate and o_proj split by heads; q_a and kv_a (the latent) replicated.
        g(
            "MLA q_b/kv_b/g/o proj",
            "mla",
            n_mla
            * (
                m.mla_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) * m.q_lora_rank
                + m.mla_heads * (m.qk_nope_head_dim + m.v_head_dim) * m.kv_lora_rank
                + (m.mla_heads * m.v_head_dim * h if m.mla_output_gate else 0)
                + h * m.mla_heads * m.v_head_dim
            ),
            o,
            True,
        ),
        g(
            "MLA q_a/kv_a proj + norms",
            "mla_replicated",
            n_mla * ((m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) * h + m.q_lora_rank + m.kv_lora_rank),
            o,
            False,
        ),
        g("layer norms + attention-residual proj", "norms", m.num_hidden_layers * norms_per_layer + h, o, False),
        g("embedding", "embedding", m.vocab_size * h, o, True),
        g("lm_head", "lm_head", 0 if m.tie_word_embeddings else m.vocab_size * h, o, True),
        # --mm-encoder-tp-mode data (every K3 recipe) keeps a whole vision encoder on each rank.
        g(
            "vision tower + projector",
            "vision",
            v["num_hidden_layers"] * vision_layer + vision_embed + projector,
            o,
            False,
        ),
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
