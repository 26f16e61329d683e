"""Stack files: where the project is, which stacks it has, and each stack's config as the engine passes it."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from .config import ConfigError, StackConfig, parse_stack_config
from .graph import ServingGraph, build_graph

SECRET_PLACEHOLDER = "[secret]"
# Set per user with `pulumi config set --secret`, so a stack file in the repo never holds them.
USER_SECRETS = ("kimi-k3:hfToken",)


class StackError(Exception):
    """A stack that cannot be read, or whose configuration the program refuses."""


def project_root() -> Path:
    """The Pulumi project holding the working directory, else the one this package was installed from."""
    for d in [Path.cwd(), *Path.cwd().parents]:
        if (d / "Pulumi.yaml").is_file() and (d / "__main__.py").is_file():
            return d
    return Path(__file__).resolve().parent.parent


def stack_names(root: Path | None = None) -> list[str]:
    root = root or project_root()
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def read_stack_config(stack: str, root: Path | None = None) -> tuple[dict[str, str], set[str]]:
    """Pulumi.<stack>.yaml -> ({key: value as the engine passes it}, secret keys). Secrets become placeholders."""
    root = root or project_root()
    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise StackError(f"no stack {stack!r}: {path.name} not found; stacks: {', '.join(stack_names(root))}")
    doc = yaml.safe_load(path.read_text()) or {}
    config: dict[str, str] = {}
    secrets: set[str] = set()
    for key, value in (doc.get("config") or {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key], _ = SECRET_PLACEHOLDER, secrets.add(key)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    # Offline tools cannot decrypt secrets; one the stack file does not hold yet (set per user) is assumed set.
    for key in USER_SECRETS:
        if key not in config:
            config[key], _ = SECRET_PLACEHOLDER, secrets.add(key)
    return config, secrets




def load_stack(stack: str, root: Path | None = None) -> tuple[StackConfig, ServingGraph]:
    """The validated config and serving graph of a stack, without Pulumi (for plan and check)."""
    config, secrets = read_stack_config(stack, root)
    try:
        cfg = parse_stack_config(config, secrets)
        return cfg, build_graph(stack, cfg)
    except ConfigError as err:
        raise StackError(str(err)) from None
