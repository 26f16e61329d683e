"""The sglang-* rules fail on a planted wrong form and pass the right one; vLLM-only rules report an SGLang worker as
not applicable instead of passing it. Objects are built here (small DGDs), so no stack is rendered."""

from __future__ import annotations

import copy

from policies import rules
from policies.rules.base import Context, Finding, Skipped


def _comp(name, type_, args, nodes=2, gpus=4, module="dynamo.sglang"):
    return {
        "name": name,
        "type": type_,
        "replicas": 1,
        "multinode": {"nodeCount": nodes},
        "podTemplate": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.5.0-kimi-k3-dev.1",
                        "command": ["python3", "-m", module],
                        "args": args,
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ]
            }
        },
    }


PREFILL = ["--tp-size", "8", "--page-size", "64", "--dcp-size", "1", "--disaggregation-mode", "prefill",
           "--disaggregation-transfer-backend", "mooncake"]  # fmt: skip
DECODE = ["--tp-size", "8", "--page-size", "64", "--dcp-size", "8", "--disaggregation-mode", "decode",
          "--disaggregation-transfer-backend", "mooncake"]  # fmt: skip
FRONTEND = {
    "name": "Frontend",
    "type": "frontend",
    "podTemplate": {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "command": ["python3", "-m", "dynamo.frontend"],
                    "args": ["--router-mode", "kv", "--kv-cache-block-size", "64"],
                }
            ]
        }
    },
}


def _dgd(prefill=PREFILL, decode=DECODE, fe=FRONTEND):
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g"},
        "spec": {
            "backendFramework": "sglang",
            "components": [
                fe,
                _comp("PrefillWorker", "prefill", list(prefill)),
                _comp("DecodeWorker", "decode", list(decode)),
            ],
        },
    }


def _findings(rule, obj):
    return [r for r in rules.RULES_BY_NAME[rule].check(obj, Context()) if isinstance(r, Finding)]


def test_right_form_passes_every_sglang_rule():
    for name in ("sglang-router-block-is-page", "sglang-disagg-roles-agree", "sglang-tp-spans-whole-nodes"):
        assert _findings(name, _dgd()) == [], name


def test_router_block_rule_fails_on_a_block_other_than_page_times_dcp():
    fe = copy.deepcopy(FRONTEND)
    fe["podTemplate"]["spec"]["containers"][0]["args"][-1] = "16"  # vLLM's old default, not SGLang's 64-token page
    (f,) = _findings("sglang-router-block-is-page", _dgd(fe=fe))
    assert "registers 64-token KV blocks" in f.message and "allowed: 64" in f.message
    # the routed role is prefill: decode's page x DCP (512) is not what the frontend must name
    fe["podTemplate"]["spec"]["containers"][0]["args"][-1] = "512"
    assert len(_findings("sglang-router-block-is-page", _dgd(fe=fe))) == 1
    no_page = [a for a in PREFILL if a not in ("--page-size", "64")]
    (f,) = _findings("sglang-router-block-is-page", _dgd(prefill=no_page))
    assert "no --page-size" in f.message


def test_disagg_rule_fails_on_mismatched_backends_and_modes():
    nixl = [("nixl" if a == "mooncake" else a) for a in DECODE]
    msgs = [f.message for f in _findings("sglang-disagg-roles-agree", _dgd(decode=nixl))]
    assert any("different --disaggregation-transfer-backend" in m for m in msgs)
    # a decode role without a backend flag runs SGLang's default, mooncake: agrees with an explicit mooncake prefill
    default = DECODE[:-2]
    assert _findings("sglang-disagg-roles-agree", _dgd(decode=default)) == []
    wrong_mode = [("prefill" if a == "decode" else a) for a in DECODE]
    msgs = [f.message for f in _findings("sglang-disagg-roles-agree", _dgd(decode=wrong_mode))]
    assert any("--disaggregation-mode is 'prefill', expected 'decode'" in m for m in msgs)


def test_tp_rule_fails_on_tp_other_than_the_pods_gpus_and_on_operator_flags():
    msgs = [
        f.message for f in _findings("sglang-tp-spans-whole-nodes", _dgd(prefill=[*PREFILL[2:], "--tp-size", "16"]))
    ]
    assert any("--tp-size 16 but its 2 pod(s) hold 8 GPUs" in m for m in msgs)
    msgs = [f.message for f in _findings("sglang-tp-spans-whole-nodes", _dgd(decode=[*DECODE, "--nnodes", "2"]))]
    assert any("sets --nnodes" in m for m in msgs)


def test_vllm_only_rule_reports_sglang_workers_not_applicable():
    results = list(rules.RULES_BY_NAME["worker-block-size-is-vllms"].check(_dgd(), Context()))
    assert not [r for r in results if isinstance(r, Finding)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    assert len(skipped) == 2 and all("not applicable" in s.reason for s in skipped)
    # and a vLLM worker in the same graph is still judged (the gate adds, never hides)
    vllm = _comp("VllmWorker", "worker", ["--tensor-parallel-size", "8"], module="dynamo.vllm")
    obj = _dgd()
    obj["spec"]["components"].append(vllm)
    findings = [
        r for r in rules.RULES_BY_NAME["worker-block-size-is-vllms"].check(obj, Context()) if isinstance(r, Finding)
    ]
    assert len(findings) == 1 and "VllmWorker" in findings[0].message
