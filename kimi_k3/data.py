"""The facts in recipes/*.yaml, read once per process (every module reads them through here)."""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .errors import UserError, read_text, yaml_error_message

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@lru_cache(maxsize=None)
def _parsed(name: str) -> Any:
    path = RECIPES / name
    text = read_text(path, "recipe file", f"recipes: {', '.join(sorted(p.name for p in RECIPES.glob('*.yaml')))}")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(yaml_error_message(f"recipes/{name}", exc)) from None


def recipe_file(name: str) -> Any:
    """recipes/<name> parsed; a private copy, so callers may change it."""
    return copy.deepcopy(_parsed(name))
