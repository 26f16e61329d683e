"""The KV block size every consumer uses is the one vLLM runs Kimi K3 with (README "KV block size").

vLLM's rule, transcribed from vllm/platforms/interface.py Platform._align_hybrid_block_size (non-"all" mamba cache
modes, which is what Kimi K3 runs: "none" without prefix caching, "align" with it):
    kernel_block_alignment_size = max(min(backend kernel block sizes), cache_config.block_size)
    attn_block_size = kernel_block_alignment_size * cdiv(mamba_page_size, kernel_block_alignment_size * attn_page_1_token)
    if cache_config.block_size < attn_block_size: cache_config.block_size = attn_block_size   # "Setting attention ..."
The engine core runs it; the API process (and Dynamo's fallback card, ai-dynamo/dynamo#9376) keeps the user's value.
"""

import copy
import math

import pytest

from conftest import STACKS
from kimi_k3 import flags
from kimi_k3.planner import kda_state_page_bytes, load_model_facts
from test_upstream_agreement import serving_facts

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
            if flags.flag_value(args, "--block-size") is not None:
                args[args.index("--block-size") + 1] = "64"
        assert len(list(check_worker_block_size_is_vllms(dgd, None))) == sum(
            1 for c in dgd["spec"]["components"] if c["type"] != "frontend"), stack
