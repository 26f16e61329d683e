"""Every enum-valued vLLM flag any stack renders takes a value vLLM accepts (recipes/facts/vllm-flags.yaml, read at
vLLM's config Literals). The class of the `--kv-cache-dtype bf16` defect: vLLM has no `bf16`, only `bfloat16`."""

from __future__ import annotations

import typing

import pytest
from conftest import ROOT

from kimi_k3 import flags as argv_flags
from kimi_k3.blueprint import Blueprint
from kimi_k3.facts.vllm_flags import flag_choices, kv_cache_dtype_flag, planner_kv_dtype
from kimi_k3.graph.recipe import Recipe

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml") if p.name != "Pulumi.yaml")


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_enum_flags_are_values_vllm_accepts(stack):
    graph = Blueprint.for_stack(stack).graph
    for role in graph.roles:
        if role.engine != "vllm":
            continue
        for flag, allowed in flag_choices().items():
            value = argv_flags.flag_value(list(role.args), flag)
            assert value is None or value in allowed, f"{stack} {role.key}: {flag} {value}; vLLM takes {allowed}"


def test_h200_renders_bfloat16():
    (role,) = Blueprint.for_stack("h200").graph.roles
    assert argv_flags.flag_value(list(role.args), "--kv-cache-dtype") == "bfloat16"


@pytest.mark.parametrize("dtype", typing.get_args(Recipe.model_fields["kv_cache_dtype"].annotation))
def test_every_recipe_kv_dtype_renders_to_a_vllm_choice_and_back(dtype):
    rendered = kv_cache_dtype_flag(dtype)
    assert rendered in flag_choices()["--kv-cache-dtype"]
    assert planner_kv_dtype(rendered) == ("bf16" if dtype == "auto" else dtype)
