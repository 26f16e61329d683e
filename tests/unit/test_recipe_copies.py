"""recipe_file hands each caller a private copy: equal to what deepcopy gave, and changing it changes nothing else."""

from __future__ import annotations

import copy

import pytest

from kimi_k3 import data


@pytest.mark.parametrize("name", data.known())
def test_a_copy_equals_the_parsed_file_and_is_private(name):
    parsed = data._parsed(name)
    before = copy.deepcopy(parsed)
    mine = data.recipe_file(name)
    assert mine == before
    if isinstance(mine, dict) and mine:
        key = next(iter(mine))
        mine[key] = "changed by a caller"
        mine["added-by-a-caller"] = [1]
    assert data._parsed(name) == before and data.recipe_file(name) == before


def test_nested_values_are_copied_and_other_types_fall_back_to_deepcopy():
    value = {"a": [{"b": 1}, "x", 2.5, None, True], "s": {1, 2}}
    mine = data.copy_plain(value)
    assert mine == value
    mine["a"][0]["b"] = 2
    mine["s"].add(3)
    assert value == {"a": [{"b": 1}, "x", 2.5, None, True], "s": {1, 2}}
