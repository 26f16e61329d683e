"""Planner tests: expected figures are derived by hand from config facts or taken from public measurements."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace

import pytest
from conftest import SHARED

from kimi_k3.commands import plan as plan_cmd
from kimi_k3.facts import model, platforms
from kimi_k3.facts.model import GB, GIB, MIB
from kimi_k3.sizing import cost as planner
from kimi_k3.sizing import memory

SHARED_CONFIG = SHARED / "model" / "Kimi-K3_config.json"


@pytest.fixture(scope="module")
def facts() -> model.ModelFacts:
    return model.load_model_facts()


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    plan_cmd.register(parser.add_subparsers())
    return parser.parse_args(["plan", *argv])


# ---------------------------------------------------------------- facts vs the published config


def test_model_yaml_matches_published_config(facts):
    if not SHARED_CONFIG.exists():
        pytest.skip(f"{SHARED_CONFIG} absent: cannot compare recipes/facts/model.yaml with the published config")
    cfg = json.loads(SHARED_CONFIG.read_text())
    t, lin, q = cfg["text_config"], cfg["text_config"]["linear_attn_config"], cfg["text_config"]["quantization_config"]
    assert (facts.num_hidden_layers, facts.hidden_size, facts.vocab_size) == (
        t["num_hidden_layers"],
        t["hidden_size"],
        t["vocab_size"],
    )
    assert facts.mla_layers == tuple(lin["full_attn_layers"]) and facts.kda_layers == tuple(lin["kda_layers"])
    assert (facts.kda_heads, facts.kda_head_dim, facts.kda_conv_kernel) == (
        lin["num_heads"],
        lin["head_dim"],
        lin["short_conv_kernel_size"],
    )
    assert (
        facts.kv_lora_rank,
        facts.qk_rope_head_dim,
        facts.q_lora_rank,
        facts.qk_nope_head_dim,
        facts.v_head_dim,
        facts.mla_heads,
    ) == (
        t["kv_lora_rank"],
        t["qk_rope_head_dim"],
        t["q_lora_rank"],
        t["qk_nope_head_dim"],
        t["v_head_dim"],
        t["num_attention_heads"],
    )
    assert (
        facts.num_experts,
        facts.experts_per_token,
        facts.num_shared_experts,
        facts.moe_intermediate_size,
        facts.routed_expert_hidden_size,
        facts.intermediate_size,
        facts.first_k_dense_replace,
    ) == (
        t["num_experts"],
        t["num_experts_per_token"],
        t["num_shared_experts"],
        t["moe_intermediate_size"],
        t["routed_expert_hidden_size"],
        t["intermediate_size"],
        t["first_k_dense_replace"],
    )
    group = q["config_groups"]["group_0"]["weights"]
    assert facts.routed_expert_bits == group["num_bits"] + 8 / group["group_size"]  # uint8 scale per group
    assert {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*lm_head.*"} <= set(q["ignore"])
    v = cfg["vision_config"]
    assert (facts.vision["num_hidden_layers"], facts.vision["hidden_size"], facts.vision["intermediate_size"]) == (
        v["vt_num_hidden_layers"],
        v["vt_hidden_size"],
        v["vt_intermediate_size"],
    )


def test_layer_split_is_24_mla_69_kda_covering_1_to_93(facts):
    # 1-based ids: together the two lists are exactly layers 1..93.
    assert len(facts.mla_layers) == 24 and len(facts.kda_layers) == 69
    assert sorted(facts.mla_layers + facts.kda_layers) == list(range(1, 94))


# ---------------------------------------------------------------- parameters and checkpoint


def test_total_and_active_parameters_match_reference(facts):
    # REFERENCE.md: ~2.78T total, ~105B active. Routed experts alone: 92 MoE layers x 896 x 3 x 3072 x 3584.
    experts = 92 * 896 * 3 * 3072 * 3584
    assert experts == 2_722_740_830_208
    assert model.total_params(facts) == pytest.approx(2.78e12, rel=0.01)
    assert model.active_params(facts) == pytest.approx(105e9, rel=0.02)


def test_checkpoint_bytes_near_1_56_tb(facts):
    # REFERENCE.md: ~1.56 TB. Experts at 4.25 bits = 1,446.46 GB by hand; the BF16 rest is ~57B params (~114 GB).
    assert 2_722_740_830_208 * 4.25 / 8 / GB == pytest.approx(1446.46, abs=0.01)
    assert model.checkpoint_bytes(facts) == pytest.approx(1.56e12, rel=0.01)


def test_one_mxfp4_expert_is_17_5_mb(facts):
    # JustVugg/colibri#720 log (real K3 checkpoint): "expert cache ... (17.5 MB/slot)" = one expert's w1+w2+w3.
    one_expert = 3 * facts.moe_intermediate_size * facts.routed_expert_hidden_size * facts.routed_expert_bits / 8
    assert one_expert / 1e6 == pytest.approx(17.5, abs=0.05)


def test_nvfp4_requant_size_matches_published_safetensors(facts):
    # vllm-project/recipes#744: RedHatAI/Kimi-K3-NVFP4 "sized from real 1645.9 GB safetensors checkpoint".
    # NVFP4 = 4-bit values + one FP8 scale per 16 = 4.5 bits on the same routed experts, the rest BF16.
    groups = model.weight_groups(facts)
    nvfp4 = sum(g.params * (4.5 if g.kind == "routed_experts" else 16) / 8 for g in groups)
    assert nvfp4 / GB == pytest.approx(1645.9, rel=0.005)


def test_fp8_block_requant_size_matches_published_estimate(facts):
    # vllm-project/recipes#688: Kimi-K3-FP8-BLOCK (experts and MLPs FP8, attention BF16) "is ~2.82 TB".
    fp8 = {"routed_experts", "shared_experts", "dense_mlp"}
    total = sum(g.params * (8 if g.kind in fp8 else 16) / 8 for g in model.weight_groups(facts))
    assert total / 1e12 == pytest.approx(2.82, rel=0.01)


# ---------------------------------------------------------------- per-GPU memory


def test_weights_per_gpu_sharded_over_tp_with_replicated_rest(facts):
    groups = model.weight_groups(facts)
    sharded = sum(g.bytes for g in groups if g.tp_sharded)
    replicated = sum(g.bytes for g in groups if not g.tp_sharded)
    # What vLLM keeps whole on every rank: latent projections + router (92 layers), MLA q_a/kv_a, KDA f_a,
    # norms and the vision encoder; by hand the latent projections alone are 92 x 2 x 3584 x 7168 x 2 B = 9.45 GB.
    assert 92 * 2 * 3584 * 7168 * 2 / GB == pytest.approx(9.453, abs=0.001)
    assert 11 * GB < replicated < 14 * GB
    for tp in (8, 16):
        assert memory.weights_bytes_per_gpu(facts, tp) == pytest.approx(sharded / tp + replicated)
    # InferenceX#2351: "the ~1.56 TB checkpoint needs ~195 GB/GPU" at TP8 (an even split); replication adds ~5%.
    assert memory.weights_bytes_per_gpu(facts, 8) / GB == pytest.approx(195 * 1.055, rel=0.02)


def test_mla_kv_bytes_per_token(facts):
    # 24 MLA layers x (512 + 64) latent x 1 B (fp8) / 2 B (bf16); TP does not split it, DCP splits tokens.
    assert memory.kv_bytes_per_token(facts, "fp8") == 24 * 576
    assert memory.kv_bytes_per_token(facts, "bf16") == 24 * 576 * 2
    assert memory.kv_bytes_per_token(facts, "fp8", dcp=4) == 24 * 576 / 4


def test_mla_kv_at_1m_context_matches_unsloth_measurement(facts):
    # unslothai/unsloth#7616: K3's 24 MLA layers need "27.0 GiB at the model's 1M train context" at f16.
    assert memory.kv_bytes_per_token(facts, "bf16") * 1048576 / GIB == pytest.approx(27.0, abs=0.05)


def test_kda_state_per_request(facts):
    # vLLM kda_state_shape: conv (3 x 96 x 128 / tp) x (4 - 1 + spec) in bf16, recurrent (96 / tp) x 128 x 128 fp32.
    tp1 = 69 * (3 * 96 * 128 * 3 * 2 + 96 * 128 * 128 * 4)
    assert memory.state_bytes_per_request(facts, 1) == tp1
    assert memory.state_bytes_per_request(facts, 8) == tp1 / 8
    # unslothai/unsloth#7616 counts the same elements (3*3*96*128 conv + 128*128*96 recurrent per KDA layer);
    # llama.cpp keeps conv in f32: 69 x 1,683,456 x 4 B = 443.11 MiB. vLLM's bf16 conv makes it smaller.
    assert 69 * (3 * 3 * 96 * 128 + 128 * 128 * 96) * 4 / MIB == pytest.approx(443.11, abs=0.01)
    assert tp1 / MIB == pytest.approx(443.11 - 69 * 3 * 3 * 96 * 128 * 2 / MIB, abs=0.01)
    # Speculation: 2 tokens widen the conv window to 3 + 2 rows and keep 1 + 2 state slots per request.
    spec2 = 3 * 69 * (3 * 96 * 128 // 8 * 5 * 2 + 96 // 8 * 128 * 128 * 4)
    assert memory.state_bytes_per_request(facts, 8, spec_tokens=2) == spec2


# ---------------------------------------------------------------- fit at the recipes' settings


@pytest.mark.parametrize(
    "gpu,tp,util", [("gb300", 8, 0.85), ("gb300", 8, 0.9), ("gb200", 16, 0.9), ("gb200", 16, 0.92)]
)
def test_recipe_topologies_fit_1m_context_with_fp8(gpu, tp, util):
    plan = memory.plan_role(gpu, tp, gpu_memory_utilization=util, kv_cache_dtype="fp8", max_model_len=1048576)
    assert plan.fits and plan.fit_margin_gib > 0
    assert plan.max_concurrent_requests(1048576) >= 1


def test_tp8_on_gb200_does_not_fit():
    plan = memory.plan_role("gb200", 8, gpu_memory_utilization=0.92)
    # 1.56 TB / 8 alone exceeds 186 GB x 0.92 = 171 GB.
    assert plan.weights_bytes_per_gpu > 186 * GB * 0.92
    assert not plan.fits and plan.fit_margin_gib < -40
    assert plan.to_json()["kv_pool_gib_per_gpu"] == 0 and plan.to_json()["max_concurrent_requests"]["8192"] == 0


def test_pool_is_hbm_times_utilization_minus_weights_and_reserve(facts):
    plan = memory.plan_role("gb300", 8, gpu_memory_utilization=0.85)
    expected = 288 * GB * 0.85 - memory.weights_bytes_per_gpu(facts, 8) - facts.activation_reserve_gib * GIB
    assert plan.pool_bytes == pytest.approx(expected)
    assert plan.to_json()["kv_pool_gib_per_gpu"] == pytest.approx(expected / GIB, abs=1e-3)


def test_kv_budget_replaces_computed_pool():
    plan = memory.plan_role("gb300", 8, kv_budget_gib=10)
    assert plan.pool_bytes == 10 * GIB
    # 10 GiB cannot hold a 1M request's 24 x 576 x 1M B = 13.5 GiB latent.
    assert not plan.fits


def test_dcp_splits_kv_and_raises_concurrency():
    base = memory.plan_role("gb200", 16, gpu_memory_utilization=0.9)
    dcp = memory.plan_role("gb200", 16, dcp=4, gpu_memory_utilization=0.9)
    assert dcp.kv_bytes_per_token == base.kv_bytes_per_token / 4
    assert dcp.max_concurrent_requests(1048576) > 3 * base.max_concurrent_requests(1048576)


def test_block_geometry_for_k3_tp8_fp8():
    # KDA page at TP8 = 4608 x 3 x 2 + 12 x 128 x 128 x 4 = 814,080 B; MLA fp8 page/token = 576 B;
    # block = 64 x ceil(814080 / (64 x 576)) = 1472 tokens; 24 MLA layers in 1 group, 69 KDA in 3 groups of 23.
    plan = memory.plan_role("gb300", 8, gpu_memory_utilization=0.85)
    assert (plan.block_size, plan.page_bytes, plan.group_size, plan.attention_groups, plan.kda_groups) == (
        1472,
        1472 * 576,
        24,
        1,
        3,
    )
    # One 1M request: ceil(1048576 / 1472) = 713 blocks + 3 KDA pages, each block 24 layers x page.
    assert plan.request_bytes_at_max_len == (713 + 3) * 24 * 1472 * 576


# ---------------------------------------------------------------- agreement with vLLM's own logs


def _kimi_linear(facts: model.ModelFacts) -> model.ModelFacts:
    # moonshotai/Kimi-Linear-48B-A3B-Instruct config.json: 27 layers, MLA at [4,8,12,16,20,24,27], 32 KDA heads.
    mla = (4, 8, 12, 16, 20, 24, 27)
    return replace(
        facts,
        num_hidden_layers=27,
        mla_layers=mla,
        kda_layers=tuple(i for i in range(1, 28) if i not in mla),
        mla_heads=32,
        kda_heads=32,
    )


def test_reproduces_vllm_log_for_kimi_linear(facts):
    # vllm-project/vllm#28228 (Kimi-Linear-48B-A3B AWQ, --tensor_parallel 2, bf16 KV, max_model_len 120000):
    #   "Available KV cache memory: 2.30 GiB" / "GPU KV cache size: 75,840 tokens" /
    #   "Maximum concurrency for 120,000 tokens per request: 2.48x" / "Add 1 padding layers".
    plan = memory.plan_role(
        "gb300", 2, kv_cache_dtype="bf16", kv_budget_gib=2.30, max_model_len=120000, facts=_kimi_linear(facts)
    )
    assert (plan.group_size, plan.attention_groups, plan.kda_groups) == (7, 1, 3)  # 20 KDA -> 7+7+6: 1 padding
    assert plan.block_size == 960
    # That vLLM (2025-11) still logged num_blocks // groups x block (_report_kv_cache_config, reported wrong for
    # hybrids in vllm#40691); the planner's vllm_kv_cache_tokens is the K3-era line, max_concurrency x max_model_len.
    assert plan.num_blocks // (plan.attention_groups + plan.kda_groups) * plan.block_size == 75840
    assert plan.vllm_max_concurrency(120000) == pytest.approx(2.48, rel=0.01)
    assert plan.vllm_kv_cache_tokens == int(plan.vllm_max_concurrency(120000) * 120000)


def test_block_count_close_to_lmcache_k3_tp8_log(facts):
    # LMCache/LMCache#4278 (moonshotai/Kimi-K3, world size 8): "Num blocks: 2874",
    # "Cache size per token (bytes): 107136" = 93 x 576 x 2, i.e. a bf16 KV cache. Assumed, not logged there:
    # a 288 GB GPU at the vLLM K3 recipe's default --gpu-memory-utilization 0.95. Agreement within 5%.
    assert 93 * 576 * 2 == 107136
    plan = memory.plan_role("gb300", 8, gpu_memory_utilization=0.95, kv_cache_dtype="bf16")
    assert plan.num_blocks == pytest.approx(2874, rel=0.05)


# ---------------------------------------------------------------- cold start


def test_load_seconds_shared_aggregate_limit():
    fsx = platforms.StorageBackend("fsx", "", shared=True, per_client_gbps=150, aggregate_gbps=4.8)
    # 1.56 TB to each of 4 pods through a 4.8 GB/s file system: 4 x 1560 / 4.8 = 1300 s.
    assert memory.load_seconds(1_560 * GB, 4, fsx) == pytest.approx(1300)
    # One pod is capped by the file system too (4.8 < 150 GB/s).
    assert memory.load_seconds(1_560 * GB, 1, fsx) == pytest.approx(325)
    efs = platforms.StorageBackend("efs", "", shared=True, per_client_gbps=1.5, aggregate_gbps=20)
    # Few pods: each is capped at its per-client 1.5 GB/s, not the aggregate.
    assert memory.load_seconds(1_500 * GB, 4, efs) == pytest.approx(1000)
    nvme = platforms.StorageBackend("nvme", "", shared=False, per_client_gbps=20, aggregate_gbps=None)
    assert memory.load_seconds(1_000 * GB, 64, nvme) == pytest.approx(50)
    with pytest.raises(ValueError):
        memory.load_seconds(1, 0, nvme)


def test_fsx_aggregate_is_size_times_per_unit_throughput():
    # PERSISTENT_2: storage TiB x MB/s/TiB (docs.aws.amazon.com FSx for Lustre, managing throughput capacity).
    backends = platforms.load_storage_backends(fsx_size_gib=9600, fsx_mbps_per_tib=500)
    assert backends["fsx_lustre"].aggregate_gbps == pytest.approx(9600 / 1024 * 0.5)
    assert set(platforms.load_storage_backends()) == {"fsx_lustre", "efs", "nvme", "s3"}


# ---------------------------------------------------------------- stack and cost


def _roles():
    decode = memory.RoleSpec("decode", "gb300", 8, 2, 2, 0.9, "fp8", 1048576)
    prefill = memory.RoleSpec("prefill", "gb300", 8, 2, 1, 0.9, "fp8", 1048576)
    return [prefill, decode]


def test_stack_gpus_nodes_cost_and_shared_cold_start(facts):
    pricing = planner.Pricing(instance_hour_usd=100.0, gpus_per_instance=4, source="test quote", as_of="2026-09")
    stack = planner.plan_stack(_roles(), pricing, output_tokens_per_second=10_000)
    # disagg-gb300 layout: 1 prefill + 2 decode workers of 2 nodes x 4 GPUs = 24 GPUs, 6 nodes.
    assert (stack.gpus, stack.nodes, stack.gpu_hours_per_hour) == (24, 6, 24)
    assert stack.cost_per_hour_usd == pytest.approx(6 * 100.0)
    # $600/h over 10,000 tok/s x 3600 s = 36M tokens/h -> $16.67 per million.
    assert stack.usd_per_million_output_tokens == pytest.approx(600 / 36)
    # All 6 pods read the whole checkpoint through the default 4800 GiB (4.6875 TiB) x 1000 MB/s/TiB FSx at once.
    fsx = stack.roles[0].plan.load_seconds["fsx_lustre"]
    assert fsx == pytest.approx(6 * model.checkpoint_bytes(facts) / (4800 / 1024 * GB))
    out = stack.to_json()
    assert {"gpus", "nodes", "cost_per_hour_usd"} <= set(out)
    assert set(out["roles"]) == {"prefill", "decode"}


def test_no_pricing_means_null_cost():
    stack = planner.plan_stack(_roles(), None, output_tokens_per_second=10_000)
    assert stack.cost_per_hour_usd is None and stack.to_json()["cost_per_hour_usd"] is None
    assert "no price configured" in plan_cmd.render_table(stack, "t")


def test_tp_must_fill_whole_nodes():
    with pytest.raises(ValueError, match="nodes"):
        planner.plan_stack([memory.RoleSpec("w", "gb200", 16, 2, 1, 0.9, "fp8", 1048576)], None)


def test_memory_fit_for_policy_rule():
    ok, why = memory.memory_fit("gb200", 8, gpu_memory_utilization=0.92)
    assert not ok and "does not fit" in why and "GB/GPU" in why
    assert memory.memory_fit("gb200", 16, gpu_memory_utilization=0.92)[0]


def test_invalid_inputs_rejected():
    for kwargs in (
        {"gpu": "mi300", "tp": 8},
        {"gpu": "gb200", "tp": 7},
        {"gpu": "gb200", "tp": 16, "dcp": 3},
        {"gpu": "gb200", "tp": 16, "kv_cache_dtype": "int4"},
    ):
        with pytest.raises(ValueError):
            memory.plan_role(**kwargs)


# ---------------------------------------------------------------- CLI


STABLE_ROLE_KEYS = {
    "weights_gb_per_gpu",
    "kv_bytes_per_token",
    "kv_pool_gib_per_gpu",
    "kv_capacity_tokens",
    "state_mib_per_request_per_gpu",
    "max_concurrent_requests",
    "fits",
    "load_seconds",
}


def test_cli_adhoc_json(capsys):
    assert plan_cmd.run(_cli("--gpu", "gb300", "--tp", "8", "--gpu-memory-utilization", "0.85", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    role = out["roles"]["worker"]
    assert STABLE_ROLE_KEYS <= set(role)
    assert role["fits"] is True and role["kv_bytes_per_token"] == 24 * 576
    assert list(role["max_concurrent_requests"]) == ["8192", "32768", "131072", "262144", "524288", "1048576"]
    assert set(role["load_seconds"]) == {"efs", "fsx_lustre", "nvme", "s3"}
    assert (out["gpus"], out["nodes"], out["cost_per_hour_usd"]) == (8, 2, None)


def test_cli_adhoc_json_is_deterministic(capsys):
    args = ("--gpu", "gb200", "--tp", "16", "--spec-tokens", "3", "--kv-cache-dtype", "bf16", "--json")
    plan_cmd.run(_cli(*args))
    first = capsys.readouterr().out
    plan_cmd.run(_cli(*args))
    assert capsys.readouterr().out == first


def test_cli_kv_budget_and_table(capsys):
    assert plan_cmd.run(_cli("--gpu", "gb200", "--tp", "16", "--kv-budget-gib", "12")) == 0
    text = capsys.readouterr().out
    assert re.search(r"KV pool per GPU +12.00 GiB", text) and "NO (margin" in text
    assert "no price configured" in text


def test_cli_price_needs_source(capsys):
    assert plan_cmd.run(_cli("--gpu", "gb200", "--tp", "16", "--instance-hour-usd", "50")) == 2
    assert "--price-source" in capsys.readouterr().err


def test_cli_cost_with_price(capsys):
    assert (
        plan_cmd.run(
            _cli(
                "--gpu",
                "gb300",
                "--tp",
                "8",
                "--replicas",
                "2",
                "--instance-hour-usd",
                "80",
                "--price-source",
                "test quote",
                "--price-as-of",
                "2026-09",
                "--output-tokens-per-second",
                "4000",
                "--json",
            )
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    # 16 GPUs = 4 instances x $80 = $320/h; 4000 tok/s = 14.4M tok/h -> $22.2222 per million.
    assert out["cost_per_hour_usd"] == 320 and out["usd_per_million_output_tokens"] == pytest.approx(22.2222)


def test_cli_rejects_bad_shapes(capsys):
    from kimi_k3.commands.main import main

    assert main(["plan", "--gpu", "gb200", "--tp", "6"]) == 2
    assert "--tp 6" in (err := capsys.readouterr().err) and "allowed: 4, 8, 12, 16" in err
    assert main(["plan"]) == 2
    capsys.readouterr()


def test_cli_plot_writes_png(tmp_path, capsys):
    target = tmp_path / "plan.png"
    assert plan_cmd.run(_cli("--gpu", "gb300", "--tp", "8", "--plot", str(target))) == 0
    capsys.readouterr()
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "stack, gpus, nodes", [("gb200", 16, 4), ("gb200-disagg", 32, 8), ("gb300", 16, 4), ("gb300-disagg", 24, 6)]
)
def test_cli_plans_each_stack(stack, gpus, nodes, capsys):
    assert plan_cmd.run(_cli(stack, "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["gpus"], out["nodes"]) == (gpus, nodes)
    assert all(role["fits"] for role in out["roles"].values())
    # every stack carries a sourced instance price: p6e Capacity Block $761.904/h per 18-instance UltraServer,
    # bought whole: the stack pays for the 18-instance block, of which its nodes are a share
    assert out["cost_per_hour_usd"] == pytest.approx(761.904, rel=1e-4)
    assert out["used_cost_per_hour_usd"] == pytest.approx(nodes * 761.904 / 18, rel=1e-4)


def test_cli_unknown_stack_is_one_clear_error(capsys):
    assert plan_cmd.run(_cli("gb500", "--json")) == 2
    err = capsys.readouterr().err
    assert "no stack 'gb500'" in err and "gb300-disagg" in err
