"""`kimi-k3 check --config`: the policy config file, every rule, key, level and value checked."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import yaml

from kimi_k3.errors import UserError, did_you_mean, read_text, yaml_error_message
from policies import rules

LEVELS = ("advisory", "mandatory", "remediate", "disabled")  # Pulumi's enforcement levels


def _check_value(where: str, value: Any, schema: Mapping[str, Any]) -> None:
    kind = schema.get("type")
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        raise UserError(
            f"{where} = {json.dumps(value)}: allowed: a whole number"
            + (f" >= {schema['minimum']}" if "minimum" in schema else "")
        )
    if kind == "integer" and "minimum" in schema and value < schema["minimum"]:
        raise UserError(f"{where} = {value}: allowed: a whole number >= {schema['minimum']}")


def load_config(path: Optional[str]) -> dict[str, dict[str, Any]]:
    """Policy config in the shape of `pulumi preview --policy-pack-config`: rule -> {key: value} or a level.

    Every rule name, key, level and value is checked (a misspelt rule would otherwise be ignored)."""
    if not path:
        return {}
    try:
        raw = yaml.safe_load(read_text(path, "--config")) or {}
    except yaml.YAMLError as exc:
        raise UserError(yaml_error_message(f"--config {path}", exc)) from None
    if not isinstance(raw, dict):
        raise UserError(f"--config {path}: allowed: a mapping of rule name -> {{key: value}} or an enforcement level")
    names = [r.name for r in rules.RULES]
    out: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        where = f"--config {path}: {name}"
        if name != "all" and name not in rules.RULES_BY_NAME:
            raise UserError(f"{where}: unknown rule{did_you_mean(str(name), names)}; allowed: all, {', '.join(names)}")
        if isinstance(value, str):
            value = {"enforcementLevel": value}
        if not isinstance(value, dict):
            raise UserError(
                f"{where} = {json.dumps(value, default=str)}: allowed: an enforcement level "
                f"({', '.join(LEVELS)}) or a mapping of settings"
            )
        schema = {} if name == "all" else dict(rules.RULES_BY_NAME[name].config_schema)
        for key, v in value.items():
            if key == "enforcementLevel":
                if v not in LEVELS:
                    raise UserError(
                        f"{where}.enforcementLevel = {json.dumps(v, default=str)}: allowed: {', '.join(LEVELS)}"
                    )
            elif key not in schema:
                allowed = ", ".join(["enforcementLevel", *schema])
                raise UserError(f"{where}.{key}: unknown setting{did_you_mean(str(key), schema)}; allowed: {allowed}")
            else:
                _check_value(f"{where}.{key}", v, schema[key])
        out[name] = dict(value)
    return out


def rule_settings(config: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the rules read: each rule's settings, without enforcement levels."""
    return {n: {k: v for k, v in c.items() if k != "enforcementLevel"} for n, c in config.items() if n != "all"}


def level_of(rule: str, default: str, config: Mapping[str, Mapping[str, Any]]) -> str:
    """The enforcement level a policy config gives a rule (its own entry, then `all`, then the rule's)."""
    return config.get(rule, {}).get("enforcementLevel") or config.get("all", {}).get("enforcementLevel") or default
