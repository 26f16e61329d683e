"""Typed role fields first, argv last (issue 26): every worker value a recipe or stack states (block size, load
format, prefix caching, max sequences, speculative config) is a typed field on the Role, filled once from the merged
flags; the argv is its rendering, and nothing in the program parses it back. Here the argv is read as vLLM reads it
(kimi_k3.flags, the policy rules' reader) and must agree with each field, for every role of every stack."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from kimi_k3 import flags
from kimi_k3.blueprint import load_stack
from kimi_k3.config import stack_files
from kimi_k3.config.stack import parse_stack_config
from kimi_k3.graph.build import build_graph
from kimi_k3.sizing import memory

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", STACKS)
def test_every_roles_typed_fields_are_what_its_argv_renders(stack):
    """The argv read as vLLM reads it (kimi_k3.flags, the rules' reader) agrees with each typed field."""
    _, graph = load_stack(stack, ROOT)
    for r in graph.roles:
        if r.engine != "vllm":  # SGLang's flags: tests/unit/test_sglang_role_fields.py
            continue
        argv = list(r.args)
        assert int(flags.flag_value(argv, "--block-size")) == r.block_size, r.key
        assert memory.vllm_block_size(argv) == r.block_size, r.key  # what vLLM raises the block to
        assert (flags.flag_value(argv, "--load-format") or "auto") == r.load_format, r.key
        assert memory._prefix_caching(argv) == r.prefix_caching, r.key
        seqs = flags.flag_value(argv, "--max-num-seqs")
        assert (None if seqs is None else int(seqs)) == r.max_num_seqs, r.key
        assert (flags.flag_value(argv, "--speculative-config") or "") == r.speculative_config, r.key
    # the recipes' decode workers state their --max-num-seqs; the planner and the mocker read it from the role
    assert graph.decode_max_num_seqs is not None and graph.decode_max_num_seqs > 1
    assert graph.block_size == graph.roles[0].block_size


def test_typed_fields_follow_a_stacks_override_of_the_flags():
    """An extraArgs override (a user's flags, not the recipe's) lands in the typed field and in the argv alike."""
    f = stack_files.read_stack_config("gb300", ROOT)
    config = dict(f.config)
    serving = json.loads(config.get("kimi-k3:serving", "{}"))  # stack files hold each key as JSON text
    serving.setdefault("roles", {}).setdefault("decode", {})["extraArgs"] = {
        "--max-num-seqs": "128",
        "--enable-prefix-caching": None,
        "--no-enable-prefix-caching": True,
    }
    config["kimi-k3:serving"] = json.dumps(serving)
    graph = build_graph("gb300", parse_stack_config(config, f.secrets))
    decode = next(r for r in graph.roles if r.key == "decode")
    assert decode.max_num_seqs == 128 and flags.flag_value(list(decode.args), "--max-num-seqs") == "128"
    assert decode.prefix_caching is False and memory._prefix_caching(list(decode.args)) is False
    assert graph.decode_max_num_seqs == 128


def test_the_mockers_batch_cap_is_the_decode_roles_max_num_seqs():
    """The most requests a decode worker runs at once is its role's --max-num-seqs, not a copy of the recipes' 256:
    the rehearsal's mocker tables (and the SLA planner's profile, the same tables) follow the field."""
    from dataclasses import replace

    from kimi_k3.rehearsal import plan as rehearsal

    _, stock = load_stack("gb300-disagg", ROOT)
    fewer = replace(stock, roles=tuple(replace(r, max_num_seqs=2) if r.type != "prefill" else r for r in stock.roles))
    assert stock.decode_max_num_seqs > 2 and fewer.decode_max_num_seqs == 2
    a, b = rehearsal.perf_profile(stock), rehearsal.perf_profile(fewer)
    assert a["prefill_ttft_ms"] == b["prefill_ttft_ms"]  # prefill: one request at a time either way
    assert a["decode_itl"] != b["decode_itl"]
    # at the shortest context and the most active tokens the cap binds: 2 requests at once step faster
    assert b["decode_itl"][-1][0] < a["decode_itl"][-1][0]
