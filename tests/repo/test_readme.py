"""docs/configure.md is the configuration reference: every key the program accepts is documented there."""

from __future__ import annotations

import re
import typing

from conftest import ROOT
from pydantic import BaseModel

from kimi_k3.config.stack import StackConfig


def keys(model: type[BaseModel]) -> set[str]:
    """Every config key name (the alias users type) reachable from a model."""
    out = set()
    for name, field in model.model_fields.items():
        out.add(field.alias or name)
        for arg in [field.annotation, *typing.get_args(field.annotation)]:
            for inner in [arg, *typing.get_args(arg)]:
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    out |= keys(inner)
    return out


def test_every_config_key_is_in_the_readme_configuration_table():
    doc = (ROOT / "docs" / "configure.md").read_text()  # moved from README.md (issue 26: README is the front door)
    table = doc[doc.index("## Every key") : doc.index("## Where per-user values live")]
    missing = sorted(k for k in keys(StackConfig) if not re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", table))
    assert missing == []
