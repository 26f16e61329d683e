"""The four SGLang stacks of Dynamo v1.5.0-kimi-k3-dev.1 (recipes/profiles/*-sglang.yaml): each one's layout and every
deliberate difference from its upstream file, stated here with the upstream value and where it was read (the upstream
files are not copied into the repo). Each stack is rendered once per session."""

from __future__ import annotations

import pytest
from conftest import ROOT, flag, main_container, workers
from support import render_stack_once as render_stack  # one render per stack per session

from policies import rules

SGLANG_STACKS = ("gb200-sglang", "gb200-disagg-sglang", "gb300-sglang", "gb300-disagg-sglang")
# ai-dynamo/dynamo releases, "Dynamo v1.5.0-kimi-k3-dev.1" (2026-09-09), Container Images.
RELEASE_IMAGE = "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.5.0-kimi-k3-dev.1"
# Release notes' Recipes line: "SGLang aggregated GB200 (32x) and GB300 (24x) profiles and disaggregated GB200 (2P1D)
# and GB300 (1P1D)"; per-role TP/nodes from recipes/kimi-k3/sglang/<profile>/deploy.yaml (commits in each profile).
LAYOUT = {  # stack -> ({component: (replicas, nodeCount, --tp-size)}, GPUs)
    "gb200-sglang": ({"SglangWorker": (2, 4, "16")}, 32),
    "gb300-sglang": ({"SglangWorker": (3, 2, "8")}, 24),
    "gb200-disagg-sglang": ({"PrefillWorker": (2, 4, "16"), "DecodeWorker": (1, 4, "16")}, 48),
    "gb300-disagg-sglang": ({"PrefillWorker": (1, 2, "8"), "DecodeWorker": (1, 2, "8")}, 16),
}
# Upstream values kept verbatim (read at the commits each profile names), per component.
UPSTREAM_KEPT = {
    "gb200-sglang": {"SglangWorker": {"--dcp-size": "16", "--ep-size": "16", "--mem-fraction-static": "0.88",
                                      "--max-running-requests": "64", "--page-size": "64", "--hicache-size": "100"}},
    "gb300-sglang": {"SglangWorker": {"--dcp-size": "8", "--mem-fraction-static": "0.92",
                                      "--max-running-requests": "64"}},
    "gb200-disagg-sglang": {
        "PrefillWorker": {"--max-running-requests": "64", "--dcp-size": "1", "--disaggregation-mode": "prefill"},
        "DecodeWorker": {"--max-running-requests": "96", "--dcp-size": "16", "--disaggregation-mode": "decode"},
    },
    "gb300-disagg-sglang": {
        "PrefillWorker": {"--max-running-requests": "32", "--mamba-full-memory-ratio": "0.7", "--dcp-size": "1"},
        "DecodeWorker": {"--max-running-requests": "64", "--dcp-size": "8", "--decode-attention-backend": "cutedsl_mla"},
    },
}  # fmt: skip


@pytest.fixture(scope="session")
def sglang_rendered():
    return {stack: render_stack(stack, ROOT) for stack in SGLANG_STACKS}


def _dgd(r):
    return next(o for o in r.objects if o["kind"] == "DynamoGraphDeployment")


def _by_name(dgd):
    return {c["name"]: c for c in workers(dgd)}


def _frontend(dgd):
    return main_container(next(c for c in dgd["spec"]["components"] if c["type"] == "frontend"))


@pytest.mark.parametrize("stack", SGLANG_STACKS)
def test_layout_and_engine_match_the_release(sglang_rendered, stack):
    dgd = _dgd(sglang_rendered[stack])
    assert dgd["spec"]["backendFramework"] == "sglang"
    comps = _by_name(dgd)
    want, gpus = LAYOUT[stack]
    assert set(comps) == set(want)
    for name, (replicas, nodes, tp) in want.items():
        c, m = comps[name], main_container(comps[name])
        assert (c["replicas"], c["multinode"]["nodeCount"], flag(m["args"], "--tp-size")) == (replicas, nodes, tp)
        assert m["command"] == ["python3", "-m", "dynamo.sglang"]
        assert m["image"] == RELEASE_IMAGE  # difference: upstream's files name nvstaging / dynamoci / post.1 builds
    assert sglang_rendered[stack].outputs["gpus"] == gpus
    # README's stacks table: nodes = GPUs / 4 per p6e node
    assert sglang_rendered[stack].outputs["nodes"] == gpus // 4


@pytest.mark.parametrize("stack", SGLANG_STACKS)
def test_upstream_values_kept(sglang_rendered, stack):
    comps = _by_name(_dgd(sglang_rendered[stack]))
    for name, values in UPSTREAM_KEPT[stack].items():
        args = main_container(comps[name])["args"]
        assert {k: flag(args, k) for k in values} == values
        # upstream --context-length 1048576, --kv-cache-dtype fp8_e4m3, the kimi_k3 parsers on the Dynamo side
        assert flag(args, "--context-length") == "1048576"
        assert flag(args, "--kv-cache-dtype") == "fp8_e4m3"
        assert flag(args, "--dyn-reasoning-parser") == flag(args, "--dyn-tool-call-parser") == "kimi_k3"


@pytest.mark.parametrize("stack", SGLANG_STACKS)
def test_deliberate_differences(sglang_rendered, stack):
    dgd = _dgd(sglang_rendered[stack])
    fe = _frontend(dgd)["args"]
    # Upstream: DYN_ROUTER_MODE=least-loaded / --router-mode least-loaded. Ours: KV-aware.
    assert flag(fe, "--router-mode") == "kv"
    for name, comp in _by_name(dgd).items():
        m = main_container(comp)
        args = m["args"]
        # Upstream: --speculative-algorithm DSPARK, --speculative-draft-model-path RadixArk/Kimi-K3-DSpark (or /draft).
        assert flag(args, "--speculative-algorithm") is None and flag(args, "--speculative-draft-model-path") is None
        assert flag(args, "--enable-linear-replayssm-spec") is None
        # Upstream: --model-path /model (hostPath) or moonshotai/Kimi-K3 via HF_HOME; ours: the verified cache.
        assert flag(args, "--model-path").startswith("/model-cache/moonshotai/Kimi-K3")
        # Upstream: a required nodeAffinity on one hard-coded nvidia.com/gpu.clique id; ours: podAffinity by clique.
        terms = comp["podTemplate"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
        assert "nvidia.com/gpu.clique" not in keys and "dedicated" not in keys
        # The operator appends --dist-init-addr/--nnodes/--node-rank (backend_sglang.go): never set by us.
        assert not {"--dist-init-addr", "--nnodes", "--node-rank"} & set(args)
        # Upstream sets --host 0.0.0.0 --port 30000 in its flag form; its configmap form and ours do not.
        assert flag(args, "--host") is None and flag(args, "--port") is None
        assert "VLLM_ENGINE_READY_TIMEOUT_S" not in {e["name"] for e in m.get("env", [])}


def test_agg_gb300_states_its_page_size(sglang_rendered):
    """Upstream agg-gb300 (493ed48 / 1932201) sets no --page-size; ours states 64 so the router block is known."""
    args = main_container(_by_name(_dgd(sglang_rendered["gb300-sglang"]))["SglangWorker"])["args"]
    assert flag(args, "--page-size") == "64"


@pytest.mark.parametrize("stack", SGLANG_STACKS)
def test_router_block_is_page_times_dcp_of_routed_role(sglang_rendered, stack):
    """dynamo/sglang/capacity.py (Dynamo 1.6.1) kv_event_block_size = page_size * dcp_size; the frontend names the
    routed role's (prefill when disaggregated)."""
    dgd = _dgd(sglang_rendered[stack])
    comps = _by_name(dgd)
    routed = main_container(comps.get("PrefillWorker") or comps["SglangWorker"])["args"]
    want = int(flag(routed, "--page-size")) * int(flag(routed, "--dcp-size") or 1)
    assert flag(_frontend(dgd)["args"], "--kv-cache-block-size") == str(want)
    assert want == {"gb200-sglang": 1024, "gb300-sglang": 512}.get(stack, 64)


@pytest.mark.parametrize("stack", SGLANG_STACKS)
def test_check_passes_and_vllm_rules_say_not_applicable(sglang_rendered, stack):
    violations, skipped = rules.run_all(sglang_rendered[stack].objects)
    assert violations == []
    na = {s.rule for s in skipped if "runs dynamo.sglang: not applicable" in s.reason}
    assert {"worker-block-size-is-vllms", "disagg-roles-use-nixl", "frontend-block-size-matches-workers"} <= na
    assert not {s.rule for s in skipped} & {"sglang-router-block-is-page", "sglang-tp-spans-whole-nodes"}
