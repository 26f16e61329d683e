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
