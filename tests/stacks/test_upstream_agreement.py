"""Our four stacks agree with NVIDIA's four published profiles on every serving fact, except deliberate fixes."""

from __future__ import annotations

import copy
import json
import math
import shlex

import pytest
import yaml
from conftest import STACKS, UPSTREAM, by_kind, main_container

from kimi_k3 import flags as argv_flags
from kimi_k3.facts.model import load_model_facts
from kimi_k3.sizing.memory import kda_state_page_bytes

SERVING_FLAGS = (
    "--tensor-parallel-size",
    "--kv-cache-dtype",
    "--reasoning-parser",
    "--dyn-reasoning-parser",
    "--dyn-tool-call-parser",
    "--disaggregation-mode",
    "--block-size",
    "--max-model-len",
    "--mm-encoder-tp-mode",
    "--gpu-memory-utilization",
)
BARE_FLAGS = ("--enable-prefix-caching", "--enable-multimodal", "--trust-remote-code")
# Where we differ from upstream on purpose: (stack, role type, flag) -> (upstream value, ours, why).
DELIBERATE = {
    ("gb300", "decode", "--block-size"): (
        None,
        "1536",
        "vLLM's aligned hybrid block (it raises 64/unset to it): engine, KV events, card and router agree",
    ),
    ("gb300", "decode", "--mm-encoder-tp-mode"): (None, "data", "every profile runs the vision encoder data-parallel"),
    ("gb300-disagg", "prefill", "--block-size"): (
        None,
        "1536",
        "vLLM's aligned hybrid block (it raises 64/unset to it): engine, KV events, card and router agree",
    ),
    ("gb300-disagg", "decode", "--block-size"): (
        None,
        "1536",
        "vLLM's aligned hybrid block (it raises 64/unset to it): engine, KV events, card and router agree",
    ),
    ("gb200", "decode", "--block-size"): (
        "64",
        "768",
        "vLLM's aligned hybrid block (it raises 64/unset to it): engine, KV events, card and router agree",
    ),
    ("gb200-disagg", "prefill", "--block-size"): (
        "64",
        "768",
        "vLLM's aligned hybrid block (it raises 64/unset to it): engine, KV events, card and router agree",
    ),
    ("gb200-disagg", "decode", "--block-size"): (
        "64",
        "768",
        "vLLM's aligned hybrid block (it raises 64/unset to it): engine, KV events, card and router agree",
    ),
    ("gb300-disagg", "prefill", "--mm-encoder-tp-mode"): (None, "data", "encoder data parallelism everywhere"),
    ("gb300-disagg", "decode", "--mm-encoder-tp-mode"): (None, "data", "encoder data parallelism everywhere"),
    ("gb300-disagg", "prefill", "--max-model-len"): (None, "1048576", "serve the full context explicitly"),
    ("gb300-disagg", "decode", "--max-model-len"): (None, "1048576", "serve the full context explicitly"),
    ("gb200", "decode", "--max-model-len"): (None, "1048576", "serve the full context explicitly"),
    ("gb200-disagg", "prefill", "--max-model-len"): (None, "1048576", "serve the full context explicitly"),
    ("gb200-disagg", "decode", "--max-model-len"): (None, "1048576", "serve the full context explicitly"),
    ("gb300", "frontend", "--kv-cache-block-size"): (None, "1536", "KV routing must hash blocks as workers do"),
    ("gb300-disagg", "frontend", "--kv-cache-block-size"): (None, "1536", "KV routing must hash blocks as workers do"),
    ("gb200", "frontend", "--kv-cache-block-size"): ("64", "768", "KV routing must hash blocks as workers do"),
    ("gb200-disagg", "frontend", "--kv-cache-block-size"): ("64", "768", "KV routing must hash blocks as workers do"),
    ("gb300", "frontend", "--router-kv-events"): (None, True, "routing on published KV events, as on GB200"),
    ("gb300-disagg", "frontend", "--router-kv-events"): (None, True, "routing on published KV events, as on GB200"),
}


def argv(container) -> list[str]:
    """The program's argv: exec-form command+args, or the command inside a `sh -c` script."""
    words = container.get("command", []) + container.get("args", [])
    if words[:1] and words[0].endswith("sh") and len(words) >= 3:
        script = words[-1].replace("\\\n", " ")
        lines = [ln for ln in script.splitlines() if ln.strip() and not ln.strip().startswith(("#", "set "))]
        words = shlex.split(" ".join(lines))
        words = words[words.index("exec") + 1 :] if "exec" in words else words
    return words


def flags(words: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[w] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def same(a, b) -> bool:
    """Flag values agree as written or as numbers ('0.9' == '0.90')."""
    try:
        return a == b or float(a) == float(b)
    except (TypeError, ValueError):
        return False


def serving_facts(objects) -> dict[str, dict]:
    """Per component type: replicas, nodeCount, and the serving flags of its main container."""
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    facts = {}
    for c in dgd["spec"]["components"]:
        f = flags(argv(main_container(c)))
        facts[c["type"]] = {
            "replicas": c.get("replicas", 1),
            "nodeCount": c.get("multinode", {}).get("nodeCount", 1),
            "flags": f,
            "kv_connector": json.loads(f["--kv-transfer-config"])["kv_connector"]
            if "--kv-transfer-config" in f
            else None,
        }
    return facts


@pytest.fixture(scope="module")
def upstream(shared_reference):
    root = shared_reference / "dynamo" / "recipes" / "kimi-k3" / "vllm"
    return {
        stack: [d for d in yaml.safe_load_all((root / UPSTREAM[stack] / "deploy.yaml").read_text()) if d]
        for stack in STACKS
    }


@pytest.mark.parametrize("stack", STACKS)
def test_same_components_topology_and_replicas(stack, rendered, upstream):
    ours, theirs = serving_facts(rendered[stack].objects), serving_facts(upstream[stack])
    assert set(ours) == set(theirs)
    for role in ours:
        assert ours[role]["replicas"] == theirs[role]["replicas"], role
        assert ours[role]["nodeCount"] == theirs[role]["nodeCount"], role
        assert ours[role]["kv_connector"] == theirs[role]["kv_connector"], role


@pytest.mark.parametrize("stack", STACKS)
def test_same_serving_flags_except_deliberate_fixes(stack, rendered, upstream):
    ours, theirs = serving_facts(rendered[stack].objects), serving_facts(upstream[stack])
    for role in ours:
        if role == "frontend":
            names = ("--router-mode", "--kv-cache-block-size", "--router-kv-events", "--http-port")
        else:
            names = SERVING_FLAGS + BARE_FLAGS
        for name in names:
            mine, upstream_value = ours[role]["flags"].get(name), theirs[role]["flags"].get(name)
            if (stack, role, name) in DELIBERATE:
                expected_upstream, expected_ours, _why = DELIBERATE[(stack, role, name)]
                assert (upstream_value, mine) == (expected_upstream, expected_ours), (role, name)
            else:
                assert same(mine, upstream_value), (stack, role, name, mine, upstream_value)


@pytest.mark.parametrize("stack", STACKS)
def test_block_sizes_agree_within_our_graph(stack, rendered):
    facts = serving_facts(rendered[stack].objects)
    frontend = facts.pop("frontend")["flags"]["--kv-cache-block-size"]
    assert {f["flags"]["--block-size"] for f in facts.values()} == {frontend}


def test_gb200_disagg_ucx_contradiction_fixed(rendered, upstream):
    def env(objects, role):
        (dgd,) = by_kind(objects, "DynamoGraphDeployment")
        c = next(c for c in dgd["spec"]["components"] if c["type"] == role)
        return {e["name"]: e.get("value") for e in main_container(c)["env"]}

    for role in ("prefill", "decode"):
        theirs, ours = env(upstream["gb200-disagg"], role), env(rendered["gb200-disagg"].objects, role)
        assert theirs["UCX_TLS"] == "^cuda_ipc" and theirs["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"  # upstream's bug
        assert "cuda_ipc" in ours["UCX_TLS"].split(",") and ours["UCX_CUDA_IPC_ENABLE_MNNVL"] == "y"


def test_upstream_ships_no_clique_pinning_and_we_always_do(rendered, upstream):
    for stack in STACKS:
        for objects, pinned in ((upstream[stack], False), (rendered[stack].objects, True)):
            (dgd,) = by_kind(objects, "DynamoGraphDeployment")
            for c in dgd["spec"]["components"]:
                if c["type"] == "frontend":
                    continue
                affinity = c["podTemplate"]["spec"].get("affinity", {}).get("podAffinity", {})
                terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", [])
                assert any(t["topologyKey"] == "nvidia.com/gpu.clique" for t in terms) is pinned, (stack, c["name"])


def test_workers_run_an_exec_form_argv_with_literal_model_path(rendered, upstream):
    """Upstream: `/bin/sh -c` script with `--model "${MODEL_ID}"` or `"${MODEL_PATH}"`; ours: python3 argv with the cache
    path written literally, because the operator re-quotes an exec-form argv for non-leader pods (no $(VAR))."""
    for stack in STACKS:
        for objects, ours in ((upstream[stack], False), (rendered[stack].objects, True)):
            (dgd,) = by_kind(objects, "DynamoGraphDeployment")
            for c in dgd["spec"]["components"]:
                if c["type"] == "frontend":
                    continue
                main = main_container(c)
                if ours:
                    assert main["command"] == ["python3", "-m", "dynamo.vllm"]
                    assert not any("$" in a for a in main["args"]), (stack, c["name"])
                    assert flags(argv(main))["--model"] == rendered[stack].outputs["modelPath"]
                else:
                    assert main["command"][0].endswith("sh") and flags(argv(main))["--model"] in (
                        "${MODEL_ID}",
                        "${MODEL_PATH}",
                    )


def _components(objects, kind):
    (dgd,) = by_kind(objects, "DynamoGraphDeployment")
    return [c for c in dgd["spec"]["components"] if (c["type"] == "frontend") == (kind == "frontend")]


def test_nvlink_kv_one_compute_domain_where_upstream_gb200_has_two(rendered, upstream):
    """Upstream disagg-gb300 shares one ComputeDomain, disagg-gb200 has one per role (and KV off NVLink by its
    ^cuda_ipc); ours: one per graph in both, KV on NVLink."""
    assert len(by_kind(upstream["gb300-disagg"], "ComputeDomain")) == 1
    assert len(by_kind(upstream["gb200-disagg"], "ComputeDomain")) == 2
    for stack in ("gb200-disagg", "gb300-disagg"):
        assert len(by_kind(rendered[stack].objects, "ComputeDomain")) == 1


def test_frontend_model_mount_and_arch_pin_differ_on_purpose(rendered, upstream):
    """Upstream GB200 frontends mount the weights by hostPath and sit on GB200 nodes (gpu.product nodeSelector);
    GB300 frontends mount nothing and are not pinned. Ours: the cache PVC read-only, pinned by kubernetes.io/arch."""
    for stack in STACKS:
        (theirs,) = _components(upstream[stack], "frontend")
        spec = theirs["podTemplate"]["spec"]
        gb200 = stack.startswith("gb200")
        assert bool(main_container(theirs).get("volumeMounts")) is gb200
        assert (spec.get("nodeSelector", {}).get("nvidia.com/gpu.product") == "NVIDIA-GB200") is gb200
        (ours,) = _components(rendered[stack].objects, "frontend")
        mount = main_container(ours)["volumeMounts"][0]
        assert mount["readOnly"] and "nodeSelector" not in ours["podTemplate"]["spec"]
        terms = ours["podTemplate"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "kubernetes.io/arch"


def test_upstream_keeps_compile_caches_in_tmp_and_we_keep_them_on_the_shared_volume(rendered, upstream):
    """Issue 15: upstream points DeepGEMM's JIT cache / FlashInfer's workspace / XDG at /tmp (lost on every restart);
    ours put every cache variable under the compile-cache mount, one keyed directory per image + flags."""
    moved = {"DG_JIT_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "XDG_CACHE_HOME"}
    for stack in STACKS:
        for objects, ours in ((upstream[stack], False), (rendered[stack].objects, True)):
            (dgd,) = by_kind(objects, "DynamoGraphDeployment")
            for c in dgd["spec"]["components"]:
                if c["type"] == "frontend":
                    continue
                env = {e["name"]: e.get("value") for e in main_container(c).get("env", [])}
                for name in moved & set(env):
                    assert env[name].startswith("/compile-cache/" if ours else "/tmp"), (stack, c["name"], name)
                if ours:
                    assert moved <= set(env), (stack, c["name"])


# ------------------------------------------------------------------ KV block size (docs/stacks.md "KV block size")
# The KV block size every consumer uses is the one vLLM runs Kimi K3 with (docs/stacks.md "KV block size").
#
# vLLM's rule, transcribed from vllm/platforms/interface.py Platform._align_hybrid_block_size (non-"all" mamba cache
# modes, which is what Kimi K3 runs: "none" without prefix caching, "align" with it):
#     kernel_block_alignment_size = max(min(backend kernel block sizes), cache_config.block_size)
#     attn_block_size = kernel_block_alignment_size * cdiv(mamba_page_size, kernel_block_alignment_size * attn_page_1_token)
#     if cache_config.block_size < attn_block_size: cache_config.block_size = attn_block_size   # "Setting attention ..."
# The engine core runs it; the API process (and Dynamo's fallback card, ai-dynamo/dynamo#9376) keeps the user's value.


FLASHINFER_MLA_KERNEL_MINIMA = (32, 64)  # the smallest kernel block FlashInfer MLA takes, either way


def vllm_engine_block(user_block: int, tp: int, kernel_min: int) -> int:
    m = load_model_facts()
    per_token = (m.kv_lora_rank + m.qk_rope_head_dim) * 1  # fp8 MLA latent: 576 bytes a token
    state = kda_state_page_bytes(m, tp)
    align = max(kernel_min, user_block)
    needed = align * math.ceil(state / (align * per_token))
    return needed if user_block < needed else user_block


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_block_is_a_fixed_point_of_vllm_and_the_router_uses_it(stack, rendered):
    facts = serving_facts(rendered[stack].objects)
    router = int(facts.pop("frontend")["flags"]["--kv-cache-block-size"])
    for role, f in facts.items():
        block, tp = int(f["flags"]["--block-size"]), int(f["flags"]["--tensor-parallel-size"])
        for kernel_min in FLASHINFER_MLA_KERNEL_MINIMA:
            assert vllm_engine_block(block, tp, kernel_min) == block, (stack, role)  # vLLM keeps it
            assert vllm_engine_block(64, tp, kernel_min) > 64, (stack, role)  # the old 64 was raised
        assert block == router, (stack, role)


def test_tp8_block_is_the_one_vllm_logs_for_kimi_k3(rendered):
    # vllm-project/vllm#50235 and vllm-project/recipes#861: "Setting attention block size to 1536 tokens" at TP8 fp8
    # with prefix caching, what the gb300 stacks run.
    for stack in ("gb300", "gb300-disagg"):
        facts = serving_facts(rendered[stack].objects)
        assert {f["flags"]["--block-size"] for f in facts.values() if "--block-size" in f["flags"]} == {"1536"}


def test_rule_refuses_the_old_block_and_accepts_the_new(rendered):
    from policies.rules.kv_transport import check_worker_block_size_is_vllms

    for stack in STACKS:
        (dgd,) = [copy.deepcopy(o) for o in rendered[stack].objects if o.get("kind") == "DynamoGraphDeployment"]
        assert list(check_worker_block_size_is_vllms(dgd, None)) == []
        for comp in dgd["spec"]["components"]:
            args = next(c for c in comp["podTemplate"]["spec"]["containers"] if c["name"] == "main")["args"]
            if argv_flags.flag_value(args, "--block-size") is not None:
                args[args.index("--block-size") + 1] = "64"
        assert len(list(check_worker_block_size_is_vllms(dgd, None))) == sum(
            1 for c in dgd["spec"]["components"] if c["type"] != "frontend"
        ), stack
