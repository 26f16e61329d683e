"""The facts in recipes/*.yaml, read once per process (every module reads them through here)."""

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
    text = read_text(path, "recipe file", f"recipes: {', '.join(sorted(p.name for p in RECIPES.glob('*.yaml')))}")
    return yaml_strict.load(text, f"recipes/{name}")  # read as stack files are: one YAML for the facts and the config


def recipe_file(name: str) -> Any:
    """recipes/<name> parsed; a private copy, so callers may change it."""
    return copy.deepcopy(_parsed(name))
