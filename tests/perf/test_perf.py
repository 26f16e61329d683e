"""The performance model (kimi_k3/sizing/perf.py) and its place in `kimi-k3 plan`: calibration against the public
measurements, stable JSON keys, --sla, curves, Pareto plot, DCP, mocker profile. Fast: reads the committed
aiconfigurator table; tests_aiconfigurator/ checks that table against the tool itself."""

from __future__ import annotations

import json

import pytest

from kimi_k3.commands import main as cli
from kimi_k3.config.base import ConfigError
from kimi_k3.sizing import aic_table, memory, mocker, perf
from kimi_k3.sizing import aiconfigurator as aic
from kimi_k3.sizing import calibration as perf_calibration
from kimi_k3.sizing import layout as perf_layout

STACKS = ("gb200", "gb200-disagg", "gb300", "gb300-disagg")
ROLE_KEYS = ("ttft_ms", "tpot_ms", "tokens_per_second_per_gpu", "tokens_per_second_per_user")


@pytest.fixture(autouse=True)
def _table_only(monkeypatch):
    """These tests read the committed table whether or not aiconfigurator is installed (its lane calls it)."""
    monkeypatch.setattr(aic_table, "_live", lambda: False)


def _plan_json(capsys, *argv: str) -> dict:
    assert cli.main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- the committed table


def test_table_covers_the_grid_and_every_stack_layout():
    points = aic_table.raw_table()["points"]
    assert aic_table.raw_table()["aiconfigurator"] == aic.VERSION
    for p in aic.grid():
        assert aic.point_key(p) in points
    for m in perf_calibration.measurements():
        assert aic.point_key(m["config"]) in points


@pytest.mark.parametrize("stack", STACKS)
def test_stack_defaults_are_aiconfigurator_points_not_interpolations(stack, capsys):
    out = _plan_json(capsys, stack)
    assert out["performance"]["source"] == "aiconfigurator"
    # The role figures are the table's, calibrated; raw_performance is aiconfigurator's own number.
    layout_point = out["performance"]["layout"]
    assert layout_point.startswith(("gb200", "gb300"))


def test_interpolation_says_so_and_lies_between_neighbours():
    layout = perf_layout.Layout("gb300", "agg", 8, 1)
    lo, _ = aic_table.raw_estimate(layout.point(32768, 1024, 4))
    hi, _ = aic_table.raw_estimate(layout.point(32768, 1024, 16))
    mid, source = aic_table.raw_estimate(layout.point(32768, 1024, 8))
    assert source == "interpolated"
    assert min(lo["tpot_ms"], hi["tpot_ms"]) <= mid["tpot_ms"] <= max(lo["tpot_ms"], hi["tpot_ms"])
    with pytest.raises(perf_layout.PerfError, match="outside"):
        aic_table.raw_estimate(layout.point(32768, 1024, 128))


# ---------------------------------------------------------------- calibration


def test_calibrated_within_15_percent_of_every_measurement_used():
    rows = [r for r in perf_calibration.calibration_report() if r["use"] == "calibrate"]
    assert rows, "no calibration measurements"
    for r in rows:
        assert abs(r["calibrated_error"]) <= 0.15, r


def test_every_measurement_has_a_source_and_a_role():
    for m in perf_calibration.measurements():
        assert m["source"].startswith("https://"), m["id"]
        for metric in m["measured"]:
            assert perf_calibration.measurement_use(m, metric) in ("calibrate", "held_out")
        assert set(m["measured"]) <= {"tokens_per_second", "tokens_per_second_per_user", "ttft_ms"}
    assert any(
        perf_calibration.measurement_use(m, k) == "held_out"
        for m in perf_calibration.measurements()
        for k in m["measured"]
    )


def test_readme_reports_the_held_out_error_the_model_gives():
    readme, doc = open("docs/plan.md").read(), open("docs/performance.md").read()  # plan.md: README's old section
    for configuration, err in perf_calibration.held_out_errors().items():  # per configuration, in both
        for text in (readme, doc):
            assert f"{configuration}: {err * 100:.1f}%" in text, "held-out error is stale: rerun the table"
    for r in perf_calibration.calibration_report():
        row = (
            f"| {r['id']} | {r['configuration']} | {r['use']} | {r['metric']} | {r['measured']:g} | "
            f"{r['raw']:,.1f} ({r['raw_error']:+.1%}) | {r['calibrated']:,.1f} ({r['calibrated_error']:+.1%}) |"
        )
        assert row in doc, row


def test_calibration_moves_raw_towards_measurement():
    for r in perf_calibration.calibration_report():
        if r["use"] == "calibrate":
            assert abs(r["calibrated_error"]) < abs(r["raw_error"])


# ---------------------------------------------------------------- plan


@pytest.mark.parametrize("stack", STACKS)
def test_plan_json_has_stable_performance_keys(stack, capsys):
    out = _plan_json(capsys, stack)
    for name, role in out["roles"].items():
        for key in ROLE_KEYS:
            assert key in role and key in role["raw_performance"], (name, key)
    decoding = [r for n, r in out["roles"].items() if n != "prefill"]
    assert all(r["tpot_ms"] > 0 and r["tokens_per_second_per_user"] > 0 for r in decoding)
    assert out["usd_per_million_output_tokens"] > 0
    # $/Mtok = what the stack costs per hour / output tokens per hour.
    perf_block = out["performance"]
    expect = out["cost_per_hour_usd"] / (perf_block["output_tokens_per_second"] * 3600) * 1e6
    assert out["usd_per_million_output_tokens"] == pytest.approx(expect, rel=1e-3)
    assert {c["isl"] for c in perf_block["curves"]} == set(aic.CONTEXTS)


def test_plan_text_shows_latency_throughput_and_cost_across_contexts(capsys):
    assert cli.main(["plan", "gb300-disagg"]) == 0
    out = capsys.readouterr().out
    for text in (
        "TTFT",
        "TPOT",
        "tokens/s per GPU",
        "tokens/s per user",
        "$ per million output tokens",
        "across context lengths",
        "1,024k",
    ):
        assert text in out, text


def test_plan_flags_change_the_workload(capsys):
    a = _plan_json(capsys, "gb300", "--isl", "8192")
    b = _plan_json(capsys, "gb300", "--isl", "131072")
    assert b["roles"]["decode"]["ttft_ms"] > a["roles"]["decode"]["ttft_ms"]
    c = _plan_json(capsys, "gb300", "--concurrency", "128")
    assert c["performance"]["workload"]["batch_per_worker"] == 64


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--isl", "0"], "argument --isl: 0 is too small; allowed: 1 to 1,048,576"),  # refused while parsed
        (["--concurrency", "0"], "argument --concurrency: 0 is too small; allowed: 1 or more"),
        (["--osl", "0"], "argument --osl: 0 is too small; allowed: 1 to 1,048,576"),
    ],
)
def test_plan_bad_workload_is_one_clear_message(argv, message, capsys):
    try:
        code = cli.main(["plan", "gb300", *argv])
    except SystemExit as exc:  # argparse refuses a bad flag value
        code = exc.code
    err = capsys.readouterr()
    if code == 2:
        assert message in err.err and "Traceback" not in err.err
    else:  # an off-grid OSL is an answer the table cannot give: said in the performance block, plan still works
        assert message in err.out


# ---------------------------------------------------------------- --sla


def test_sla_ranks_by_cost_marks_ours_and_deploys(capsys):
    out = _plan_json(capsys, "--sla", "ttft_ms=20000,tpot_ms=100", "--isl", "32768", "--osl", "1024")
    layouts = out["layouts"]
    assert layouts and {lay["gpu"] for lay in out["ours"]} <= {"gb200", "gb300"}
    costs = [lay["usd_per_million_output_tokens"] for lay in layouts]
    assert costs == sorted(costs)
    for lay in layouts:
        assert lay["ttft_ms"] <= 20000 and lay["tpot_ms"] <= 100
    assert {lay["ours"] for lay in out["ours"]} <= set(STACKS) and out["ours"]
    # The answer is deployable: our config model and graph accept it (no ConfigError).
    _deploys(out["best_stack_config"])


def test_sla_with_request_rate_replicates_and_ranks_by_hourly_cost(capsys):
    out = _plan_json(capsys, "--sla", "ttft_ms=30000,tpot_ms=200", "--isl", "8192", "--request-rate", "5")
    best = out["layouts"][0]
    assert best["replicas"] * 1 >= 1
    hourly = [lay["cost_per_hour_usd"] for lay in out["layouts"]]
    assert hourly == sorted(hourly)
    _deploys(out["best_stack_config"])


def _deploys(cfg_values: dict) -> None:
    _graph({k: v for k, v in cfg_values.items() if k != "kimi-k3:recipe"}, cfg_values["kimi-k3:recipe"])


@pytest.mark.parametrize(
    "sla, message",
    [
        ("ttft_ms=1000", "missing tpot_ms"),
        ("ttft=1,tpot_ms=2", "is not KEY=VALUE"),
        ("ttft_ms=abc,tpot_ms=2", "is not a number"),
        ("ttft_ms=-1,tpot_ms=2", "must be > 0"),
    ],
)
def test_sla_bad_input_is_one_clear_message(sla, message, capsys):
    assert cli.main(["plan", "--sla", sla]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_sla_impossible_says_none(capsys):
    assert cli.main(["plan", "--sla", "ttft_ms=1,tpot_ms=1"]) == 1
    assert "none" in capsys.readouterr().out


# ---------------------------------------------------------------- DCP


# vllm-project/vllm#50055 ([Kimi-K3] DCP support, 8x GB300, the vLLM Kimi-K3 recipe's Blackwell profile:
# --max-model-len 1048576 --kv-cache-dtype fp8 --enable-prefix-caching): "HBM KV capacity per GPU:
# TP8: 1.933M tokens / 25.12 GiB; DCP8: 19.752M tokens / 34.28 GiB", i.e. vLLM's "GPU KV cache size" line.
@pytest.mark.parametrize("dcp, gib, logged", [(1, 25.12, 1_933_000), (8, 34.28, 19_752_000)])
def test_kv_cache_size_against_vllm_kimi_k3_dcp_pr(dcp, gib, logged):
    plan = memory.plan_role("gb300", 8, dcp=dcp, kv_budget_gib=gib, prefix_caching=True)
    assert round(plan.vllm_kv_cache_tokens, -3) == logged


def test_dcp8_kv_cache_size_by_vllms_accounting():
    # The same DCP8 figure by hand, step by step, from vLLM's rules (not from the planner):
    kda_page = 3 * 96 * 128 // 8 * 3 * 2 + 96 // 8 * 128 * 128 * 4  # KDA conv + recurrent state at TP8: 814,080 B
    block = 128 * -(-kda_page // (128 * 576))  # align mode: 1536 tokens (vllm#50235's log)
    blocks = int(34.28 * 2**30) // (block * 576) // 24  # 24 layers per group share a block: 1733
    per_request = -(-(1048576 // 8) // block) + 3 * 2  # cdiv(len / dcp, block) + 3 KDA groups x 2
    assert (block, blocks, per_request) == (1536, 1733, 92)
    plan = memory.plan_role("gb300", 8, dcp=8, kv_budget_gib=34.28, prefix_caching=True)
    assert (plan.block_size, plan.num_blocks, plan.blocks_per_request(1048576)) == (block, blocks, per_request)
    assert plan.vllm_kv_cache_tokens == int(blocks / per_request * 1048576) == 19_751_980
    # Without align mode (no prefix caching) the same memory logs 20.39M: the 64-token block and 1 + 0 state blocks.
    assert round(memory.plan_role("gb300", 8, dcp=8, kv_budget_gib=34.28).vllm_kv_cache_tokens, -4) == 20_390_000


def test_prefix_caching_block_is_1536_at_tp8_and_follows_the_stacks_flags():
    # vllm-project/vllm#50235 (Kimi-K3, TP8, fp8 KV, prefix caching): "Setting attention block size to 1536 tokens".
    assert memory.plan_role("gb300", 8, prefix_caching=True).block_size == 1536
    from kimi_k3.blueprint import stack_plan

    for name in ("gb300", "gb300-disagg"):  # every stack's recipe passes --enable-prefix-caching
        assert all(r.plan.prefix_caching and r.plan.block_size == 1536 for r in stack_plan(name).roles)
    off = _graph(
        {
            "kimi-k3:serving": {
                "roles": {
                    "decode": {"extraArgs": {"--enable-prefix-caching": None, "--no-enable-prefix-caching": True}}
                }
            }
        }
    )
    from kimi_k3.graph.model import role_prefix_caching

    assert not role_prefix_caching(next(r for r in off.roles if r.key == "decode"))


def _graph(overrides: dict, recipe: str = "gb300"):
    """The serving graph of stack `recipe` with `overrides` merged into its kimi-k3:* config (as `plan` reads it)."""
    from kimi_k3.config.stack import parse_stack_config
    from kimi_k3.config.stack_files import read_stack_config
    from kimi_k3.graph.build import build_graph
    from kimi_k3.graph.recipe import merge

    stack = read_stack_config(recipe)
    config = dict(stack.config)
    for key, value in overrides.items():
        base = json.loads(config[key]) if key in config else {}
        config[key] = json.dumps(merge(base, value) if isinstance(value, dict) else value)
    return build_graph(recipe, parse_stack_config(config, stack.secrets))


def test_dcp_role_option_reaches_the_worker_flags_and_the_planner(capsys):
    graph = _graph({"kimi-k3:serving": {"roles": {"decode": {"dcp": 8}}}})
    decode = next(r for r in graph.roles if r.key == "decode")
    args = list(decode.args)
    assert args[args.index("--decode-context-parallel-size") + 1] == "8"
    assert decode.dcp == 8


@pytest.mark.parametrize(
    "role, value, message",
    [
        ("decode", 3, "must divide the role's tp 8"),
    ],
)
def test_dcp_bad_values_are_refused(role, value, message):
    with pytest.raises(ConfigError, match=message):
        _graph({"kimi-k3:serving": {"roles": {role: {"dcp": value}}}})


def test_dcp_speculation_and_interleave_refused_whatever_the_image(monkeypatch):
    from kimi_k3 import data as kimi_k3_data
    from kimi_k3.graph import build as graph

    real = kimi_k3_data.recipe_file

    def allow_all(name):  # an image that does run DSpark under DCP (none is listed yet)
        data = real(name)
        if name == "facts/dcp.yaml":
            data["speculative_with_dcp_by_image"] = {k: True for k in data["speculative_with_dcp_by_image"]}
        return data

    monkeypatch.setattr(graph, "recipe_file", allow_all)
    spec = {"--speculative-config": '{"method":"dspark"}'}
    _graph({"kimi-k3:serving": {"roles": {"decode": {"dcp": 8, "extraArgs": spec}}}})
    with pytest.raises(ConfigError, match="--cp-kv-cache-interleave-size > 1"):
        _graph(
            {
                "kimi-k3:serving": {
                    "roles": {"decode": {"dcp": 8, "extraArgs": {**spec, "--cp-kv-cache-interleave-size": "16"}}}
                }
            }
        )


def test_dcp_on_prefill_and_with_speculation_refused():
    with pytest.raises(ConfigError, match="only applies to roles that decode"):
        _graph({"kimi-k3:serving": {"roles": {"prefill": {"dcp": 8}}}}, "gb300-disagg")
    spec = {"--speculative-config": '{"method":"dspark","num_speculative_tokens":8}'}
    # Our image's vLLM cannot run Kimi K3 DSpark (ai-dynamo/dynamo#12843), let alone under DCP.
    with pytest.raises(ConfigError, match="does not run Kimi K3 speculative decoding"):
        _graph({"kimi-k3:serving": {"roles": {"decode": {"dcp": 8, "extraArgs": spec}}}})
    # The same flags without DCP are the user's business; with dcp 1 nothing is refused.
    _graph({"kimi-k3:serving": {"roles": {"decode": {"extraArgs": spec}}}})
    with pytest.raises(ConfigError, match="derived by the graph"):
        _graph({"kimi-k3:serving": {"roles": {"decode": {"extraArgs": {"--decode-context-parallel-size": "8"}}}}})


# ---------------------------------------------------------------- memory and mocker


@pytest.mark.parametrize("gpu, tp", [("gb200", 16), ("gb300", 8), ("gb300", 16)])
def test_memory_comparison_with_aiconfigurator(gpu, tp):
    cmp = memory.memory_comparison(gpu, tp)
    assert cmp is not None
    # The difference docs/plan.md explains: aiconfigurator leaves out the MXFP4 scales and the vision tower.
    # With those two terms the weights agree within 0.1%.
    assert cmp["difference_gib"] > 5
    assert abs(cmp["residual_gib"]) < 0.001 * cmp["aiconfigurator_weights_gib"]


def test_mocker_profile_has_the_mockers_npz_keys():
    prof = mocker.mocker_profile(perf_layout.Layout("gb300", "disagg", 8, 2, 8, 1))
    assert set(prof) == {
        "prefill_isl",
        "prefill_ttft_ms",
        "decode_active_kv_tokens",
        "decode_context_length",
        "decode_itl",
    }
    assert prof["prefill_isl"] == sorted(prof["prefill_isl"])
    assert len(prof["decode_itl"]) == len(prof["decode_active_kv_tokens"])
    assert all(len(row) == len(prof["decode_context_length"]) for row in prof["decode_itl"])
    # Longer prompts take longer to prefill; more active tokens per step take longer to decode.
    assert prof["prefill_ttft_ms"][-1] > prof["prefill_ttft_ms"][0]
    assert prof["decode_itl"][-1][-1] > prof["decode_itl"][0][-1]


@pytest.mark.parametrize("stack", STACKS)
def test_rehearsal_timing_comes_from_the_performance_model(stack):
    from kimi_k3.blueprint import load_stack
    from kimi_k3.rehearsal import plan as rehearsal

    _, graph = load_stack(stack)
    prof = rehearsal.perf_profile(graph)
    layout = perf_layout.Layout.from_roles(
        perf_layout.RoleLayout(
            r.key, "prefill" if r.type == "prefill" else "decode", graph.platform.name, r.tp, r.replicas
        )
        for r in graph.roles
    )
    # The first prefill entry is the model's calibrated TTFT for one 8k request on this layout.
    first = perf.estimate(layout, perf_layout.Workload(8192, perf_layout.DEFAULT_OSL, layout.replicas), live=False)
    assert prof["prefill_isl"][0] == 8192
    assert prof["prefill_ttft_ms"][0] == pytest.approx(first.ttft_service_ms, rel=1e-3)  # idle: no queue
