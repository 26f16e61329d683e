"""recipes/<kind>/<name>.yaml, read once per process (every module reads them through here; recipes/README.md)."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

from kimi_k3 import yaml_strict
from kimi_k3.errors import read_text

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@lru_cache(maxsize=None)
def _parsed(name: str) -> Any:
    path = RECIPES / name
    text = read_text(path, "recipe file", f"recipes: {', '.join(known())}")
    return yaml_strict.load(text, f"recipes/{name}")  # read as stack files are: one YAML for the facts and the config


def known() -> list[str]:
    """Every recipe file, as recipe_file() takes it: its path under recipes/ (`facts/model.yaml`)."""
    return sorted(p.relative_to(RECIPES).as_posix() for p in RECIPES.glob("*/*.yaml"))


_SCALARS = frozenset((str, int, float, bool, type(None)))


def copy_plain(value: Any) -> Any:
    """A private copy of parsed YAML/JSON (dicts, lists, scalars); anything else goes through copy.deepcopy.
    About three times as fast as deepcopy on this data, which is copied ~30,000 times a test run (bench/README.md)."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else copy_plain(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else copy_plain(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


def recipe_file(name: str) -> Any:
    """recipes/<name> parsed (`name` is the path under recipes/, e.g. "facts/model.yaml"); a private copy, so callers
    may change it."""
    return copy_plain(_parsed(name))
