"""The facts in recipes/*.yaml, read once per process (every module reads them through here)."""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@lru_cache(maxsize=None)
def _parsed(name: str) -> Any:
    return yaml.safe_load((RECIPES / name).read_text())


def recipe_file(name: str) -> Any:
    """recipes/<name> parsed; a private copy, so callers may change it."""
    return copy.deepcopy(_parsed(name))
