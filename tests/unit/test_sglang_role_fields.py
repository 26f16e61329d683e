"""SGLang roles' typed fields are what their argv renders, read with SGLang's flag names (recipes/facts/sglang.yaml):
the block is the KV router's (--page-size x --dcp-size, dynamo/sglang/capacity.py), the batch limit
--max-running-requests, the radix cache on unless --disable-radix-cache. Engine fields and bad recipes too."""

from __future__ import annotations

import pytest
from conftest import ROOT

from kimi_k3 import flags
from kimi_k3.blueprint import load_stack
from kimi_k3.config.base import ConfigError
from kimi_k3.graph import recipe as recipe_mod
from kimi_k3.graph.recipe import load_recipe

SGLANG_STACKS = ("gb200-sglang", "gb200-disagg-sglang", "gb300-sglang", "gb300-disagg-sglang")


@pytest.mark.parametrize("stack", SGLANG_STACKS)
def test_sglang_roles_typed_fields_are_their_argv(stack):
    _, graph = load_stack(stack, ROOT)
    assert graph.engine == "sglang"
    for r in graph.roles:
        argv = list(r.args)
        assert r.engine == "sglang"
        assert flags.flag_value(argv, "--block-size") is None  # vLLM's flag: never given to dynamo.sglang
        page, dcp = int(flags.flag_value(argv, "--page-size")), int(flags.flag_value(argv, "--dcp-size") or 1)
        assert (r.block_size, r.dcp) == (page * dcp, dcp), r.key
        assert int(flags.flag_value(argv, "--tp-size")) == r.tp
        assert float(flags.flag_value(argv, "--mem-fraction-static")) == r.gpu_memory_utilization
        assert int(flags.flag_value(argv, "--max-running-requests")) == r.max_num_seqs
        assert r.prefix_caching is ("--disable-radix-cache" not in argv)


@pytest.mark.parametrize("stack", ("gb200", "gb200-disagg", "gb300", "gb300-disagg"))
def test_seed_recipes_default_to_vllm(stack):
    _, graph = load_stack(stack, ROOT)
    assert graph.engine == "vllm" and {r.engine for r in graph.roles} == {"vllm"}


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"pageSize": None}, "engine sglang: set pageSize"),
        ({"blockSize": 64}, "engine sglang: set pageSize (SGLang's --page-size), not blockSize"),
        ({"engine": "trtllm"}, "engine"),
    ],
)
def test_bad_sglang_recipe_is_one_clear_error(monkeypatch, change, expected):
    real = recipe_mod._recipe_data

    def patched(name):
        data = dict(real(name))
        for k, v in change.items():
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        return data

    monkeypatch.setattr(recipe_mod, "_recipe_data", patched)
    with pytest.raises(ConfigError) as err:
        load_recipe("gb300-sglang")
    assert "recipes/profiles/gb300-sglang.yaml" in str(err.value) and expected in str(err.value)


def test_vllm_recipe_refuses_page_size(monkeypatch):
    real = recipe_mod._recipe_data
    monkeypatch.setattr(recipe_mod, "_recipe_data", lambda n: {**real(n), "pageSize": 64})
    with pytest.raises(ConfigError, match="pageSize is SGLang's"):
        load_recipe("gb300")


def test_vllm_dcp_key_on_an_sglang_stack_is_one_clear_error():
    from conftest import assert_one_clear_error

    assert_one_clear_error(
        "gb300-disagg-sglang",
        {"serving": {"roles": {"decode": {"dcp": 8}}}},
        ["kimi-k3:serving.roles.decode.dcp = 8", "--dcp-size", "allowed: leave dcp unset"],
    )


def test_operator_injected_flag_in_extra_args_is_refused():
    from conftest import assert_one_clear_error

    assert_one_clear_error(
        "gb300-sglang",
        {"serving": {"roles": {"worker": {"extraArgs": {"--nnodes": "2"}}}}},
        ["kimi-k3:serving.roles.worker.extraArgs", "--nnodes", "the Dynamo operator injects it"],
    )
