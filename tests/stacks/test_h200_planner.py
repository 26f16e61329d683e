"""TP x PP in the planner (per-stage weights and KV), the performance model's refusal, and the topology rules on a
stack whose TP group is one node while its pipeline spans four."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import ROOT, SHARED, by_kind, main_container, workers
from support import render_stack_once

from kimi_k3.blueprint import Blueprint
from kimi_k3.commands import plan_perf
from kimi_k3.facts.model import GB, load_model_facts, weight_groups
from kimi_k3.sizing import perf, pipeline
from kimi_k3.sizing.memory import memory_fit, plan_role
from policies.rules.base import Context
from policies.rules.topology import (
    check_model_fits_at_tp,
    check_multinode_claims_compute_domain,
    check_tp_group_fits_nvlink_domain,
    check_tp_group_pinned_to_clique,
)


def _vllm_get_pp_indices(num_layers: int, rank: int, pp: int) -> tuple[int, int]:
    """vllm/distributed/utils.py get_pp_indices as written there (no VLLM_PP_LAYER_PARTITION)."""
    layers_per_partition = num_layers // pp
    partitions = [layers_per_partition for _ in range(pp)]
    if remaining_layers := num_layers % pp:
        for i in range(2, remaining_layers + 2):
            partitions[-i] += 1
    start = sum(partitions[:rank])
    return start, start + partitions[rank]


@pytest.mark.parametrize(("layers", "pp"), [(93, 4), (93, 2), (61, 4), (64, 8), (7, 7)])
def test_stages_split_layers_as_vllm_does(layers, pp):
    got = [(r.start, r.stop) for r in pipeline.stage_ranges(layers, pp)]
    assert got == [_vllm_get_pp_indices(layers, i, pp) for i in range(pp)]


def test_each_stage_holds_the_config_files_attention_layers():
    """Stage layer kinds from the published config.json (not from our model facts); its ids are 1-based (vLLM's
    Kimi Linear: `layer_idx + 1 in kda_layers`)."""
    text = json.loads((SHARED / "model" / "Kimi-K3_config.json").read_text())["text_config"]
    full = set(text["linear_attn_config"]["full_attn_layers"])
    m = load_model_facts()
    for i, r in enumerate(pipeline.stage_ranges(text["num_hidden_layers"], 4)):
        s = pipeline.stage_facts(m, 4, i)
        assert len(s.mla_layers) == len([k for k in r if k + 1 in full])
        assert len(s.kda_layers) == len(r) - len(s.mla_layers)


def test_pp_plan_is_the_tightest_stages_and_kv_counts_its_layers_only():
    m = load_model_facts()
    plan = plan_role("h200", 8, pp=4, gpu_memory_utilization=0.85, kv_cache_dtype="bf16", prefix_caching=True)
    stage_weights = [pipeline.stage_weights_bytes_per_gpu(m, 8, 4, i) for i in range(4)]
    text = json.loads((SHARED / "model" / "Kimi-K3_config.json").read_text())["text_config"]
    full = set(text["linear_attn_config"]["full_attn_layers"])
    most_mla = max(len([k for k in r if k + 1 in full]) for r in pipeline.stage_ranges(93, 4))
    assert plan.pp == 4 and plan.weights_bytes_per_gpu in stage_weights
    # The binding stage holds the most MLA layers (7 of 24): latent per token per GPU = 7 x (512 + 64) x 2 (bf16).
    assert plan.kv_bytes_per_token == most_mla * (text["kv_lora_rank"] + text["qk_rope_head_dim"]) * 2 == 8064
    # The stages together hold every layer's weights once: the sum is the TP8 (un-staged) footprint, plus the
    # vision tower each stage repeats.
    vision = sum(g.bytes for g in weight_groups(m) if g.kind == "vision")
    tp8 = plan_role("h200", 8, gpu_memory_utilization=0.85, kv_cache_dtype="bf16").weights_bytes_per_gpu
    assert sum(stage_weights) == pytest.approx(tp8 + 3 * vision, rel=1e-9)
    assert plan.fits and not memory_fit("h200", 8, gpu_memory_utilization=0.85, kv_cache_dtype="bf16")[0]
    assert 50 * GB < plan.weights_bytes_per_gpu < 141 * 0.85 * GB


def test_plan_refuses_performance_for_pp_with_a_clear_message():
    stack = Blueprint.for_stack("h200").plan
    est, why = plan_perf.performance(stack, perf.Workload(8192, 1024, 16))
    assert est is None
    assert "TP8 x PP4 on h200" in why and "no pipeline-parallel layout" in why
    with pytest.raises(perf.PerfError):
        plan_perf.layout_of(stack)


@pytest.fixture(scope="module")
def dgds(rendered):
    h200 = render_stack_once("h200", ROOT)
    return {
        name: by_kind(r.objects, "DynamoGraphDeployment")[0]
        for name, r in (("h200", h200), ("gb200", rendered["gb200"]))
    }


def _findings(check, objects):
    ctx = Context(config={})
    return (
        [r for o in objects for r in check(o, ctx)]
        if check is not check_multinode_claims_compute_domain
        else list(check(objects, ctx))
    )


RULES = (check_multinode_claims_compute_domain, check_tp_group_pinned_to_clique, check_tp_group_fits_nvlink_domain)


@pytest.mark.parametrize("check", RULES, ids=lambda c: c.__name__)
def test_rules_pass_h200_and_still_catch_a_multinode_tp_group(dgds, check):
    assert _findings(check, [dgds["h200"]]) == []
    # Without the pipeline flag, h200's 4 nodes are one TP group: NVLink domain, clique and channel rules fire.
    flat = copy.deepcopy(dgds["h200"])
    args = main_container(workers(flat)[0])["args"]
    i = args.index("--pipeline-parallel-size")
    del args[i : i + 2]
    assert _findings(check, [flat])


def test_gb200_without_clique_or_channel_is_still_caught(dgds):
    bad = copy.deepcopy(dgds["gb200"])
    spec = workers(bad)[0]["podTemplate"]["spec"]
    spec["affinity"].pop("podAffinity")
    spec["resourceClaims"] = []
    assert _findings(check_tp_group_pinned_to_clique, [bad])
    assert _findings(check_multinode_claims_compute_domain, [bad])


def test_memory_rule_plans_the_pipeline(dgds):
    assert _findings(check_model_fits_at_tp, [dgds["h200"]]) == []


def test_rehearsal_times_pp_with_the_mockers_own_model_and_says_why():
    from kimi_k3.rehearsal.plan import perf_profile

    with pytest.raises(perf.PerfError, match="TP8 x PP4 on h200: no pipeline-parallel layout"):
        perf_profile(Blueprint.for_stack("h200").graph)
