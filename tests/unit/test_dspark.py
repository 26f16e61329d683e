"""DSpark (kimi-k3:serving.speculation): staged with the weights, no Hub access in any pod, counted by the planner
and the performance model, refused where the image or DCP cannot run it."""

from __future__ import annotations

import json

import pytest
from conftest import assert_one_clear_error, by_kind, env_of, main_container, render_with, workers
from support import pod_specs

from kimi_k3 import flags as argv_flags

REV = "1" * 40
DRAFTER = "Inferact/Kimi-K3-DSpark"
SPEC = {"method": "dspark", "drafterRevision": REV}
STAGED = {"kind": "efs", "nodeLocalWeights": False}  # a weights path whose download Job stages the drafter
STACK = "gb300-disagg-v1.5"


def _graph(stack: str, serving: dict | None = None, storage: dict | None = None):
    """The serving graph of `stack` with kimi-k3:serving / kimi-k3:storage merged in (as `plan` reads it)."""
    from kimi_k3.config.stack import parse_stack_config
    from kimi_k3.config.stack_files import read_stack_config
    from kimi_k3.graph.build import build_graph
    from kimi_k3.graph.recipe import merge

    sf = read_stack_config(stack)
    config = dict(sf.config)
    for key, value in (("kimi-k3:serving", serving), ("kimi-k3:storage", storage)):
        if value is not None:
            config[key] = json.dumps(merge(json.loads(config.get(key, "{}")), value))
    return build_graph(stack, parse_stack_config(config, sf.secrets))


@pytest.fixture(scope="module")
def dspark_render():
    return render_with(STACK, serving={"speculation": SPEC}, storage=STAGED)


def test_workers_read_the_staged_drafter_and_no_pod_reaches_the_hub_for_it(dspark_render):
    dgd = by_kind(dspark_render.objects, "DynamoGraphDeployment")[0]
    staged = f"/model-cache/{DRAFTER}@{REV}"
    for c in workers(dgd):
        m = main_container(c)
        spec = json.loads(argv_flags.flag_value(m["args"], "--speculative-config"))
        assert (spec["method"], spec["model"], spec["num_speculative_tokens"]) == ("dspark", staged, 7), c["name"]
        assert env_of(m)["HF_HUB_OFFLINE"] == "1"
        cache = [v for v in m["volumeMounts"] if v["mountPath"] == "/model-cache"]
        assert cache and all(v.get("readOnly") for v in cache), c["name"]  # read-only to workers
    stagers = []
    for name, pod in pod_specs(dspark_render.objects):
        text = json.dumps(pod)
        assert "huggingface.co" not in text and "hf://" not in text and "snapshot_download" not in text, name
        if DRAFTER in text.replace(staged, ""):  # the repo id other than inside the staged local path
            stagers.append(name)
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            for flag in ("--model", "--speculative-config"):
                value = argv_flags.flag_value(c.get("args", []), flag) or ""
                assert f'"model":"{DRAFTER}' not in value and value != DRAFTER, (name, flag)
    # Only the model-download Job names the drafter's repo: it downloads it at the pinned revision and hashes it.
    assert len(stagers) == 1 and "(Job)" in stagers[0], stagers
    (job,) = [o for o in by_kind(dspark_render.objects, "Job") if f"{o['metadata']['name']} (Job)" == stagers[0]]
    c = job["spec"]["template"]["spec"]["containers"][0]
    script = " ".join(c.get("command", []) + c.get("args", []))
    env = env_of(c)
    assert (env["DRAFTER_REPO"], env["DRAFTER_REVISION"], env["DRAFTER_PATH"]) == (DRAFTER, REV, staged)
    assert 'hf download "$DRAFTER_REPO" --revision "$DRAFTER_REVISION" --local-dir "$DRAFTER_PATH"' in script
    assert 'MODEL_PATH="$DRAFTER_PATH" python3 /scripts/verify_checkpoint.py' in script


def test_the_planner_counts_the_drafter():
    plain = _graph(STACK, storage=STAGED)
    spec = _graph(STACK, serving={"speculation": SPEC}, storage=STAGED)
    from kimi_k3.graph.role_plans import role_kv_plans

    before, after = role_kv_plans(plain)["decode"], role_kv_plans(spec)["decode"]
    drafter_per_gpu = 3.56e9 * 2 / 8  # recipes/facts/speculation.yaml: ~3.56B BF16 params, sharded by TP8
    assert after.weights_bytes_per_gpu - before.weights_bytes_per_gpu == pytest.approx(drafter_per_gpu)
    assert before.pool_bytes - after.pool_bytes == pytest.approx(drafter_per_gpu)
    assert after.spec_tokens == 7 and after.vllm_kv_cache_tokens < before.vllm_kv_cache_tokens


def test_the_performance_model_takes_the_acceptance_length():
    from kimi_k3.commands.plan_perf import speculation_of

    spec = _graph(STACK, serving={"speculation": SPEC}, storage=STAGED)
    assert (speculation_of(spec).method, speculation_of(spec).num_speculative_tokens) == ("dspark", 7)
    assert speculation_of(spec, 3.0).acceptance_length == 3.0
    with pytest.raises(ValueError, match="runs no speculative decoding"):
        speculation_of(_graph(STACK, storage=STAGED), 3.0)


@pytest.mark.parametrize(
    ("stack", "serving", "storage", "expected"),
    [
        # ai-dynamo/dynamo#12843: the 1.4.0 build's vLLM cannot load the drafter.
        ("gb300-disagg", {"speculation": SPEC}, STAGED, ["kimi-k3:serving.speculation.method", "#12843"]),
        # DCP with speculation: the existing refusal (recipes/facts/dcp.yaml), reached through the typed option.
        (
            "gb300-v1.5",
            {"speculation": SPEC, "roles": {"decode": {"dcp": 8}}},
            STAGED,
            ["kimi-k3:serving.roles.decode.dcp = 8", "decode context parallelism"],
        ),
        # (The s3 fetchers, the FSx import and the node-local copy now stage the drafter: no longer refused, see
        # tests/stacks/test_dspark_storage_paths.py.)
        (
            STACK,
            {"speculation": {**SPEC, "numSpeculativeTokens": 8}},
            STAGED,
            ["numSpeculativeTokens = 8", "allowed: 1..7"],
        ),
        (STACK, {"speculation": {**SPEC, "drafterRevision": "main"}}, STAGED, ["drafterRevision", "40-hex"]),
    ],
)
def test_refused_with_one_clear_error(stack, serving, storage, expected):
    overrides = {"serving": serving} if storage is None else {"serving": serving, "storage": storage}
    assert_one_clear_error(stack, overrides, expected)
