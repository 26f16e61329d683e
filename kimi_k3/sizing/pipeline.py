"""Pipeline parallelism (vLLM --pipeline-parallel-size): which decoder layers each stage holds, and that stage's
weights per GPU, so the memory plan of a TP x PP worker is the plan of its tightest stage."""

from __future__ import annotations

from dataclasses import replace

from kimi_k3.facts.model import ModelFacts, weight_groups

# What each weight family scales with when a stage holds only some decoder layers.
_MOE = ("routed_experts", "shared_experts", "latent_proj", "router")
_KDA = ("kda", "kda_replicated")
_MLA = ("mla", "mla_replicated")


def stage_ranges(num_layers: int, pp: int) -> list[range]:
    """vllm/distributed/utils.py get_pp_indices (no VLLM_PP_LAYER_PARTITION): num_layers // pp layers each, the
    remainder one each to the stages before the last (partitions[-i] += 1 for i in 2..remainder+1)."""
    if pp < 1 or pp > num_layers:
        raise ValueError(f"pp {pp} must be between 1 and the {num_layers} decoder layers")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    out, start = [], 0
    for n in parts:
        out.append(range(start, start + n))
        start += n
    return out


def _held(ids: tuple[int, ...], layers: range) -> tuple[int, ...]:
    # Layer ids are 1-based in the config (recipes/facts/model.yaml); stages index layers from 0.
    return tuple(i for i in ids if i - 1 in layers)


def stage_facts(m: ModelFacts, pp: int, stage: int) -> ModelFacts:
    """The model as one stage holds it: only its MLA and KDA layers (KV pages, KDA state and grouping follow)."""
    layers = stage_ranges(m.num_hidden_layers, pp)[stage]
    return replace(m, mla_layers=_held(m.mla_layers, layers), kda_layers=_held(m.kda_layers, layers))


def stage_weights_bytes_per_gpu(m: ModelFacts, tp: int, pp: int, stage: int) -> float:
    """One GPU's weights in `stage`: layer families by the stage's share of those layers; the embedding on the
    first stage, lm_head on the last (vLLM's PPMissingLayer elsewhere); the vision tower on every stage (assumed,
    the conservative choice: not read in vLLM's Kimi K3 model file)."""
    layers = stage_ranges(m.num_hidden_layers, pp)[stage]
    moe = [i for i in layers if i >= m.first_k_dense_replace]
    share = {
        **{k: len(moe) / (m.num_hidden_layers - m.first_k_dense_replace) for k in _MOE},
        **{k: len(_held(m.kda_layers, layers)) / len(m.kda_layers) for k in _KDA},
        **{k: len(_held(m.mla_layers, layers)) / len(m.mla_layers) for k in _MLA},
        "dense_mlp": (len(layers) - len(moe)) / max(m.first_k_dense_replace, 1),
        "norms": len(layers) / m.num_hidden_layers,
        "embedding": 1.0 if stage == 0 else 0.0,
        "lm_head": 1.0 if stage == pp - 1 else 0.0,
        "vision": 1.0,
    }
    return sum((g.bytes / tp if g.tp_sharded else g.bytes) * share[g.kind] for g in weight_groups(m))
